// ESLint flat config: JavaScript's recommended rules plus typescript-eslint's type-aware
// recommended rules, on every TypeScript file of the service, its tests, scripts, bench and examples.
// Formatting is Prettier's job (see .prettierrc.json); none of these rule sets enforce layout.
import js from '@eslint/js';
import { defineConfig } from 'eslint/config';
import tseslint from 'typescript-eslint';

/** The engines' names, as code outside src/db must not compare them (see the engine block below). */
const ENGINE_NAMES = '/^(mssql|postgres|postgresql|pglite|sqlserver|sqlite|mysql)$/i';

export default defineConfig(
  {
    // Build output, dependencies, recorded bench runs and this file: nothing here is ours to lint.
    ignores: ['dist/**', 'node_modules/**', 'bench/results/**', 'coverage/**', 'eslint.config.js'],
  },
  {
    files: ['src/**/*.ts', 'test/**/*.ts', 'scripts/**/*.ts', 'bench/**/*.ts', 'examples/**/*.ts'],
    extends: [js.configs.recommended, tseslint.configs.recommendedTypeChecked],
    languageOptions: {
      parserOptions: {
        // Type information for each file comes from the tsconfig.json that includes it, which
        // includes src, test, scripts, bench and examples (so `npm run typecheck` checks the same files).
        projectService: true,
        tsconfigRootDir: import.meta.dirname,
      },
    },
    rules: {
      // Fastify plugins and hooks signal that they are done by returning a promise (a plain
      // function must call done() instead), and the service's hooks, Kysely's driver interface and
      // Fastify handlers are promise-returning contracts: `async` without `await` is how this code
      // writes them, and dropping it, as the rule asks, would hang a plugin or break a contract.
      '@typescript-eslint/require-await': 'off',
      // A parameter that an interface requires but an implementation does not use is named with a
      // leading underscore (a Kysely driver's callbacks, a Fastify hook's request).
      '@typescript-eslint/no-unused-vars': ['error', { argsIgnorePattern: '^_' }],
      '@typescript-eslint/no-floating-promises': [
        'error',
        {
          // node:test's test()/describe() return promises that the runner itself tracks and
          // reports: nothing is lost when a file does not await them. A subtest started with
          // t.test() is still flagged: it must be awaited, or it is cancelled with its parent.
          allowForKnownSafeCalls: [{ from: 'package', package: 'node:test', name: ['test', 'it', 'describe', 'suite'] }],
        },
      ],
    },
  },
  {
    // A function longer than a screen hides its steps: the service's own code splits such a function
    // into named parts. Tests, scripts and bench are exempt (a test reads top to bottom as a story).
    files: ['src/**/*.ts'],
    rules: {
      'max-lines-per-function': ['error', { max: 60, skipBlankLines: true, skipComments: true, IIFEs: true }],
    },
  },
  {
    // One module per database engine (src/db/engines): outside src/db, nothing tells engines apart.
    // Code asks the engine's capabilities and statement builders (src/db/dialect.ts), never its name,
    // never the registry, never an engine module. A new engine is then one module and one registry entry.
    files: ['src/**/*.ts'],
    ignores: ['src/db/**'],
    rules: {
      'no-restricted-syntax': [
        'error',
        {
          selector: `BinaryExpression[operator=/^[!=]==?$/] > Literal[value=${ENGINE_NAMES}]`,
          message: 'Engines are not told apart outside src/db: ask the engine for a capability (src/db/dialect.ts).',
        },
        {
          selector: `SwitchCase > Literal[value=${ENGINE_NAMES}]`,
          message: 'Engines are not told apart outside src/db: ask the engine for a capability (src/db/dialect.ts).',
        },
        {
          selector: 'CallExpression[callee.name=/^(engineOf|dialectOf)$/], CallExpression[callee.property.name=/^(engineOf|dialectOf)$/]',
          message: "Which engine a database runs on is src/db's business: use its capabilities and statement builders.",
        },
        {
          selector: 'BinaryExpression[operator="instanceof"][right.name=/^(Mssql|Postgres|PGlite|Sqlite|Mysql)Adapter$/]',
          message: 'Engines are chosen once, by src/db/engines/registry.ts, from the dialect adapter.',
        },
      ],
      'no-restricted-imports': [
        'error',
        {
          patterns: [
            {
              regex: '(^|/)db/engines(/|$)',
              message: 'Engine modules stand behind src/db: import the capabilities from src/db/dialect.ts.',
            },
          ],
        },
      ],
    },
  },
  {
    // Kysely's migrations take Kysely<any>: a migration runs against the schema as it was when it was
    // written, not the Database type of today's code (Kysely's documented convention). A migration is
    // never edited once released, so its length stays as written.
    files: ['src/schema/migrations/**/*.ts', 'src/inbox/migrations.ts'],
    rules: { '@typescript-eslint/no-explicit-any': 'off', 'max-lines-per-function': 'off' },
  },
);
