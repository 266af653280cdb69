import assert from 'node:assert/strict';
import { existsSync, readdirSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { join } from 'node:path';
import { describe, test } from 'node:test';
import { cruise, type ICruiseResult, type IViolation } from 'dependency-cruiser';
import extractDepcruiseOptions from 'dependency-cruiser/config-utl/extract-depcruise-options';
import extractTSConfig from 'dependency-cruiser/config-utl/extract-ts-config';

const root = fileURLToPath(new URL('../..', import.meta.url));

/**
 * Violations of .dependency-cruiser.cjs that the code has today, each written `rule: from → to`.
 * The inbox core still names the bookstore's Database type, and the database factory and the SQL
 * Server dialect import each other; the inbox core rework removes both. The test fails when one of
 * these is gone, so that this list only ever shrinks.
 */
function describeViolation(violation: IViolation): string {
  return `${violation.rule.name}: ${violation.from} → ${violation.to}`;
}

/** Cruises src/ (and examples/, once there is one) from the repository root with the project's rules. */
async function cruiseTheService(): Promise<ICruiseResult> {
  const options = await extractDepcruiseOptions(join(root, '.dependency-cruiser.cjs'));
  const tsConfig = extractTSConfig(join(root, 'tsconfig.json'));
  const entries = ['src', 'examples'].filter((directory) => existsSync(join(root, directory)));
  const { output } = await cruise(entries, { ...options, baseDir: root, validate: true }, {}, { tsConfig });
  assert.ok(typeof output === 'object', 'the cruise returns its result as an object');
  return output;
}

/** A module below src/<folder>/ stands for its folder; a module at src/'s root (app.ts, config.ts) for itself. */
function folderOf(path: string): string | undefined {
  return /^src\/[^/]+\//.exec(path)?.[0] ?? (path.startsWith('src/') ? path : undefined);
}

/** The circles in the graph of folders (strongly connected components of two or more), each as `a → b → a`. */
function folderCycles(result: ICruiseResult): string[] {
  const edges = new Map<string, Set<string>>();
  for (const module of result.modules) {
    const from = folderOf(module.source);
    if (from === undefined) continue;
    const targets = edges.get(from) ?? new Set<string>();
    edges.set(from, targets);
    for (const dependency of module.dependencies) {
      const to = folderOf(dependency.resolved);
      if (to !== undefined && to !== from) targets.add(to);
    }
  }
  const reaches = (from: string): Set<string> => {
    const seen = new Set<string>();
    const stack = [from];
    while (stack.length > 0) {
      for (const next of edges.get(stack.pop()!) ?? []) {
        if (seen.has(next)) continue;
        seen.add(next);
        stack.push(next);
      }
    }
    return seen;
  };
  const reach = new Map([...edges.keys()].map((node) => [node, reaches(node)]));
  const circles = new Set<string>();
  for (const node of edges.keys()) {
    if (!reach.get(node)!.has(node)) continue;
    const members = [...edges.keys()].filter((other) => reach.get(node)!.has(other) && reach.get(other)!.has(node)).sort();
    circles.add(members.join(' ⇄ '));
  }
  return [...circles];
}

describe('the import graph (.dependency-cruiser.cjs)', async () => {
  const result = await cruiseTheService();
  const found = result.summary.violations.map(describeViolation);

  test('the cruise resolves the TypeScript sources: .js specifiers map to .ts files', () => {
    // The service's own modules plus the packages and built-ins they import.
    assert.ok(result.modules.length > 100, `only ${result.modules.length} modules were found`);
    const sources = result.modules.filter((module) => module.source.startsWith('src/'));
    const cruised = new Set(sources.map((module) => module.source));
    const onDisk = readdirSync(join(root, 'src'), { recursive: true, encoding: 'utf8' })
      .filter((file) => file.endsWith('.ts'))
      .map((file) => `src/${file.split('\\').join('/')}`);
    assert.deepEqual(
      onDisk.filter((file) => !cruised.has(file)),
      [],
      'TypeScript files under src/ that the cruise did not reach',
    );
    const app = result.modules.find((module) => module.source === 'src/app.ts');
    assert.ok(app, 'src/app.ts was not cruised');
    assert.ok(
      app.dependencies.some((dependency) => dependency.resolved.startsWith('src/')),
      'src/app.ts has no resolved dependency on another src/ module',
    );
    const unresolved = sources.flatMap((module) =>
      module.dependencies
        .filter((dependency) => dependency.couldNotResolve && dependency.module.startsWith('.'))
        .map((dependency) => `${module.source} → ${dependency.module}`),
    );
    assert.deepEqual(unresolved, [], 'relative imports that the cruise could not resolve');
  });

  test('no import breaks a rule: no circle, the inbox core stands alone, the bookstore and the examples use the public entries', () => {
    assert.deepEqual(found, [], `import rule violations:\n  ${found.join('\n  ')}`);
  });
  test('no folder imports a folder that imports it: the src/ folders form one direction', () => {
    const cycles = folderCycles(result);
    assert.deepEqual(cycles, [], `folders in a circle of imports:\n  ${cycles.join('\n  ')}`);
  });
});
