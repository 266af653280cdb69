import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, test } from 'node:test';
import { guideSnippets } from '../support/guide-snippets.js';
import { LIBRARY_ENTRIES, REPOSITORY } from '../support/inbox-library.js';

/**
 * docs/inbox.md's TypeScript snippets, read as test/package/adopter.test.ts reads them to compile and
 * run them against the packed package: each says which file of the application it is, and imports the
 * library by its package names, never the repository's files.
 */
describe("docs/inbox.md's snippets", () => {
  const snippets = guideSnippets(readFileSync(join(REPOSITORY, 'docs/inbox.md'), 'utf8'));

  test('each TypeScript snippet names its file, and they are read in order', () => {
    assert.deepEqual(
      snippets.map((snippet) => snippet.file),
      ['schema.ts', 'credit-account.ts', 'send-receipt.ts', 'app.ts', 'try-it.ts', 'consumer.ts', 'publish.ts', 'settle.ts'],
    );
    assert.deepEqual(
      snippets.filter((snippet) => snippet.run).map((snippet) => snippet.file),
      ['try-it.ts', 'settle.ts'],
    );
  });

  test("imports are packages (the library's by its public names) or another snippet's file", () => {
    const files = new Set(snippets.map((snippet) => snippet.file.replace(/\.ts$/, '.js')));
    const wrong = snippets.flatMap((snippet) =>
      [...snippet.code.matchAll(/from '([^']+)'/g)]
        .map((match) => match[1]!)
        .filter((specifier) =>
          specifier.startsWith('.')
            ? !(specifier.startsWith('./') && files.has(specifier.slice(2)))
            : specifier.startsWith('bookstore-inventory') && !(specifier in LIBRARY_ENTRIES),
        )
        .map((specifier) => `${snippet.file}: ${specifier}`),
    );
    assert.deepEqual(wrong, []);
  });

  test('a TypeScript block that names no file is refused, with its line', () => {
    assert.throws(() => guideSnippets('text\n\n```ts\nconst a = 1;\n```\n'), /^Error: line 3: a TypeScript snippet needs file=<name>\.ts/);
    assert.throws(() => guideSnippets('```ts file=a.ts\n```\n```ts file=a.ts\n```\n'), /a\.ts is named by two snippets/);
    assert.deepEqual(guideSnippets('```ts file=a.ts run\nconst a = 1;\n```\n```sh\nnpm test\n```\n'), [
      { file: 'a.ts', run: true, code: 'const a = 1;\n', line: 2 },
    ]);
  });
});
