// The service's import graph: which module may import which. Checked by
// test/architecture/imports.test.ts and by `npm run check:imports`.
//
// Type-only imports count (tsPreCompilationDeps): the inbox core must not even name the
// bookstore's types, or it cannot be lifted out of this service.

/** Everything in src/ that is the bookstore, its transports or its wiring, not the inbox core. */
const OUTSIDE_THE_INBOX_CORE = [
  '^src/inventory/',
  '^src/notifications/',
  '^src/http/',
  '^src/messaging/',
  '^src/routes/',
  '^src/plugins/',
  '^src/console/',
  '^src/admin/',
  '^src/outbox/',
  '^src/schema/',
  '^src/app[.]ts$',
  '^src/config[.]ts$',
  '^src/command-kinds[.]ts$',
  '^src/commands[.]ts$',
];

/** Modules outside src/inbox/ and src/adapters/ that the inbox library's entries import (compiled into its package). */
const LIBRARY_MODULES = [
  '^src/db/(dialect|statements|failures|deferred-writes|json-rows)[.]ts$',
  '^src/db/engines/',
  '^src/json/parse-json[.]ts$',
  '^src/validation/compile[.]ts$',
];

/** @type {import('dependency-cruiser').IConfiguration} */
module.exports = {
  forbidden: [
    {
      name: 'engine-layer-stands-alone',
      severity: 'error',
      comment:
        'src/db is the engine layer: statements, failures and one module per database engine, over any schema. ' +
        "It knows neither the inbox nor the bookstore's schema (src/schema), its domain, transports or routes, " +
        'so the inbox library and any application can build on it.',
      from: { path: '^src/db/' },
      to: { path: ['^src/inbox/', '^src/adapters/', ...OUTSIDE_THE_INBOX_CORE] },
    },
    {
      name: 'engines-behind-the-registry',
      severity: 'error',
      comment:
        'Engines are told apart in one place: the engine modules under src/db/engines, reached through src/db ' +
        '(dialect.ts and the modules beside it). Outside src/db, code asks for capabilities, never an engine.',
      from: { path: '^src/', pathNot: '^src/db/' },
      to: { path: '^src/db/engines/' },
    },
    {
      name: 'no-circular',
      severity: 'error',
      comment:
        'A module in a cycle cannot be understood, tested or loaded on its own, and the order in which ' +
        'the cycle is evaluated decides which of its bindings are still undefined at import time.',
      from: { path: '^src/' },
      to: { circular: true },
    },
    {
      name: 'inbox-core-stands-alone',
      severity: 'error',
      comment:
        'src/inbox/ is the idempotent-consumer core: it knows commands, keys and its own tables, not the ' +
        "bookstore's schema, its transports, routes, plugins or configuration.",
      from: { path: '^src/inbox/' },
      to: { path: OUTSIDE_THE_INBOX_CORE },
    },
    {
      name: 'adapters-stand-alone',
      severity: 'error',
      comment:
        'src/adapters/ are the inbox for Fastify and for RabbitMQ: they take what they need as options, so ' +
        'another application can use them; the bookstore is one application of them, never their dependency.',
      from: { path: '^src/adapters/' },
      to: { path: OUTSIDE_THE_INBOX_CORE },
    },
    {
      name: 'inbox-core-needs-no-adapter',
      severity: 'error',
      comment: 'The core knows no transport: the adapters depend on it, not the other way round.',
      from: { path: '^src/inbox/' },
      to: { path: '^src/adapters/' },
    },
    {
      name: 'bookstore-uses-public-entries',
      severity: 'error',
      comment:
        'The bookstore is one application of the inbox library: it imports the library as another application would, ' +
        "through its entries (the core's index and machinery, the adapters' index modules), never a module behind them. " +
        "The few modules outside src/inbox/ and src/adapters/ that the library is built from (LIBRARY_MODULES) are the library's own.",
      from: { path: '^src/', pathNot: ['^src/inbox/', '^src/adapters/', ...LIBRARY_MODULES] },
      to: {
        path: ['^src/inbox/', '^src/adapters/'],
        pathNot: [
          '^src/inbox/index[.]ts$',
          '^src/inbox/machinery[.]ts$',
          '^src/adapters/fastify/index[.]ts$',
          '^src/adapters/amqp/index[.]ts$',
        ],
      },
    },
    {
      name: 'examples-use-public-entries',
      severity: 'error',
      comment:
        'An example shows how a user of the library would wire it up, so it imports only what such a user ' +
        'can: the inbox core and the transport adapters, through their index modules.',
      from: { path: '^examples/' },
      to: {
        path: '^src/',
        pathNot: ['^src/inbox/index[.]ts$', '^src/adapters/fastify/index[.]ts$', '^src/adapters/amqp/index[.]ts$'],
      },
    },
  ],
  options: {
    doNotFollow: { path: 'node_modules' },
    exclude: { path: ['^dist/', '^node_modules/'] },
    tsPreCompilationDeps: true,
    tsConfig: { fileName: 'tsconfig.json' },
    enhancedResolveOptions: {
      exportsFields: ['exports'],
      conditionNames: ['import', 'require', 'node', 'default', 'types'],
      mainFields: ['module', 'main', 'types', 'typings'],
    },
  },
};
