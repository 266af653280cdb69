import assert from 'node:assert/strict';
import { fileURLToPath } from 'node:url';
import { describe, test } from 'node:test';
import { ESLint } from 'eslint';

const root = fileURLToPath(new URL('../..', import.meta.url));

/**
 * Code that tells engines apart: by name, through the registry, and by importing an engine module. The
 * project's ESLint configuration refuses it outside src/db and lets the engine modules themselves do it.
 */
const BRANCHING = `import type { Kysely } from 'kysely';
import { mssql } from '../db/engines/mssql.js';
import { engineOf } from '../db/engines/registry.js';

export function limitFor(db: Kysely<unknown>): number {
  if (engineOf(db).name === 'mssql') return mssql.maxParameters;
  return 65_535;
}
`;

/** The same snippet as it would be written inside src/db/engines (relative imports from there). */
const INSIDE = BRANCHING.replaceAll('../db/engines/', './');

/**
 * Lints `code` as if it were the file at `filePath`: an existing file, so that the type-aware parser's
 * project service knows it (it parses the text given, not the file on disk).
 */
async function messagesFor(code: string, filePath: string): Promise<string[]> {
  const eslint = new ESLint({ cwd: root });
  const [result] = await eslint.lintText(code, { filePath: `${root}${filePath}` });
  assert.ok(result !== undefined);
  return result.messages.map((m) => `${m.ruleId ?? 'fatal'}: ${m.message}`);
}

describe('engines are told apart only inside src/db (eslint.config.js)', () => {
  test('a repository comparing engine names, asking the registry and importing an engine module fails lint', async () => {
    const messages = await messagesFor(BRANCHING, 'src/inventory/stock.repository.ts');
    const rules = messages.map((m) => m.split(':')[0]);
    assert.equal(rules.filter((r) => r === 'no-restricted-imports').length, 2, messages.join('\n'));
    assert.ok(
      messages.some((m) => m.startsWith('no-restricted-syntax') && /not told apart/.test(m)),
      messages.join('\n'),
    );
    assert.ok(
      messages.some((m) => m.startsWith('no-restricted-syntax') && /src\/db's business/.test(m)),
      messages.join('\n'),
    );
  });

  test('a switch on the engine name fails lint too', async () => {
    const code = `export function pick(name: string): number {
  switch (name) {
    case 'postgres':
      return 1;
    default:
      return 0;
  }
}
`;
    const messages = await messagesFor(code, 'src/outbox/outbox.repository.ts');
    assert.ok(
      messages.some((m) => m.startsWith('no-restricted-syntax')),
      messages.join('\n'),
    );
  });

  test('the same snippet inside src/db/engines passes', async () => {
    assert.deepEqual(await messagesFor(INSIDE, 'src/db/engines/common.ts'), []);
  });
});
