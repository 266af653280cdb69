import assert from 'node:assert/strict';
import { spawn, spawnSync, type ChildProcess, type SpawnSyncReturns } from 'node:child_process';
import { once } from 'node:events';
import { copyFileSync, existsSync, mkdtempSync, readFileSync, readdirSync, rmSync, symlinkSync, writeFileSync } from 'node:fs';
import { createPrivateKey, X509Certificate } from 'node:crypto';
import { request as httpRequest } from 'node:http';
import { request as httpsRequest } from 'node:https';
import { builtinModules } from 'node:module';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { join, posix } from 'node:path';
import { fileURLToPath } from 'node:url';
import { after, before, describe, test } from 'node:test';
import { parse as parseYaml } from 'yaml';
import { loadConfig } from '../../src/config.js';
import { ProducerRegistry } from '../../src/http/producer-auth.js';
import { parseMssqlUrl } from '../../src/schema/mssql.js';
import { createDatabaseStatement, parseMysqlUrl } from '../../src/schema/mysql.js';
import type { FastifyInstance } from 'fastify';
import { apiKeyDigest } from '../../src/producer-config.js';
import { freePort } from '../../scripts/free-port.js';
import { postgresDatabase, testDatabases, type TestDatabaseHandle } from '../support/databases.js';
import { newId, testApp } from '../support/fixtures.js';
import {
  dependencies,
  MissingVariableError,
  parseDockerfile,
  parseEnvFile,
  referencesTo,
  renderCompose,
  requiredVariables,
  serviceEnvironment,
  type ComposeFile,
  type Env,
} from '../support/compose.js';
import { samplerFromEnv, tracingRequested } from '../../src/runtime/tracing.js';

/**
 * The deployment files, checked the way a first `docker compose up` would use them: the
 * environment each app replica gets (compose's interpolation, the file's defaults, only the
 * required variables set, from .env.example) must be a configuration the service accepts, and
 * the image's start command must find the build's output.
 */

const root = fileURLToPath(new URL('../../', import.meta.url));
const composeText = readFileSync(join(root, 'docker-compose.yml'), 'utf8');
const envExamplePath = join(root, '.env.example');
const envExample = existsSync(envExamplePath) ? parseEnvFile(readFileSync(envExamplePath, 'utf8')) : {};

/** What an operator must put in .env; none may have a default in the file. */
const SECRETS = [
  'ADMIN_TOKEN',
  'PRODUCER_API_KEYS',
  'WEBHOOK_SECRET',
  'MSSQL_SA_PASSWORD',
  'APP_DB_PASSWORD',
  'POSTGRES_PASSWORD',
  'MARIADB_ROOT_PASSWORD',
  'RABBITMQ_PASSWORD',
];

/** The API key whose digest .env.example's placeholder PRODUCER_API_KEYS holds (its comment says so). */
const EXAMPLE_ORDERS_KEY = /digest of the key "([^"]+)"/.exec(readFileSync(envExamplePath, 'utf8'))?.[1];

/** Only what the file requires, taken from .env.example: everything else keeps the file's default. */
const required = requiredVariables(composeText);
const firstStartEnv: Env = Object.fromEntries(required.map((name) => [name, envExample[name]]));

const runtimeStage = parseDockerfile(join(root, 'Dockerfile')).at(-1)!;

/** The app services (built from this repository), by the variant that starts them. */
function appServices(compose: ComposeFile): { name: string; variant: string }[] {
  return Object.entries(compose.services)
    .filter(([, service]) => service.build !== undefined)
    .map(([name, service]) => ({ name, variant: service.profiles?.join(',') || 'default' }));
}

describe('docker-compose.yml, as docker compose renders it', () => {
  const compose = renderCompose(composeText, firstStartEnv);

  test('there is an app service for the SQL Server stack and one for each of the postgres and mariadb profiles', () => {
    const variants = appServices(compose).map((s) => s.variant);
    assert.deepEqual(variants.sort(), ['default', 'mariadb', 'postgres'], `app services: ${JSON.stringify(appServices(compose))}`);
  });

  for (const { name, variant } of appServices(compose)) {
    test(`${name} (${variant}): the container's environment is a configuration the service accepts`, () => {
      const service = compose.services[name]!;
      // The image's ENV first, then the service's environment over it, as the container sees it.
      const containerEnv = { ...runtimeStage.env, ...serviceEnvironment(service, firstStartEnv) };
      const config = loadConfig(containerEnv);
      assert.equal(tracingRequested(containerEnv), false, 'no traces until .env names an OTLP endpoint');
      const tracedEnv = { ...firstStartEnv, OTEL_EXPORTER_OTLP_ENDPOINT: 'http://jaeger:4318' };
      const traced = serviceEnvironment(renderCompose(composeText, tracedEnv).services[name]!, tracedEnv);
      assert.equal(traced.OTEL_EXPORTER_OTLP_ENDPOINT, 'http://jaeger:4318');
      assert.equal(tracingRequested({ ...runtimeStage.env, ...traced }), true, 'an endpoint in .env starts the exporter');
      assert.doesNotThrow(() => samplerFromEnv({ ...runtimeStage.env, ...traced }), 'the sampler defaults are ones the service reads');

      assert.equal(config.host, '0.0.0.0', 'the proxy reaches the replicas over the network');
      assert.equal(config.adminToken, envExample.ADMIN_TOKEN, 'the admin token is the one from .env');

      // Producer credentials from .env: the ordering service's API key (as a digest), the webhook sender's
      // secret; the command queues record under their own producer. Anonymous commands are refused.
      assert.deepEqual(
        config.producers.map((p) => p.id),
        ['orders'],
      );
      assert.equal(config.webhookSecret, envExample.WEBHOOK_SECRET);
      assert.equal(config.amqpProducer, 'amqp');
      assert.equal(config.allowAnonymousCommands, false);
      assert.ok(EXAMPLE_ORDERS_KEY !== undefined, '.env.example names the placeholder key');
      const registry = new ProducerRegistry(config);
      assert.equal(registry.byApiKey(EXAMPLE_ORDERS_KEY)?.id, 'orders', "the placeholder digest is the named key's");
      assert.equal(registry.byApiKey(config.adminToken!), undefined, 'the admin token is no producer credential');
      assert.ok(config.rateLimitMax > 0, 'commands are rate-limited');
      assert.throws(
        () => loadConfig({ ...containerEnv, PRODUCER_API_KEYS: '', WEBHOOK_SECRET: '' }),
        /HOST=0\.0\.0\.0 .*ALLOW_ANONYMOUS_COMMANDS/,
        'without credentials the replica refuses to start',
      );
      assert.equal(containerEnv.DATABASE_CREATE, undefined, 'the init step creates the database, not the app');

      // The database is a service this one waits for, reached with the app's own login.
      const database = new URL(config.databaseUrl);
      assert.ok(dependencies(service).includes(database.hostname), `${name} does not wait for ${database.hostname}`);
      assert.equal(compose.services[database.hostname]?.healthcheck !== undefined, true, `${database.hostname} has no health check`);
      if (variant === 'default') {
        const settings = parseMssqlUrl(config.databaseUrl);
        assert.notEqual(settings.user.toLowerCase(), 'sa', 'the app must not log in as sa');
        assert.equal(settings.password, envExample.APP_DB_PASSWORD);
        assert.equal(settings.database, 'bookstore');
      } else if (variant === 'mariadb') {
        assert.match(config.databaseUrl, /^(mysql|mariadb):\/\//);
        const settings = parseMysqlUrl(config.databaseUrl);
        assert.notEqual(settings.user, 'root', 'the app must not log in as root');
        assert.equal(settings.password, envExample.APP_DB_PASSWORD);
        assert.equal(settings.database, 'bookstore');
        // The init step the app waits for makes the database as `npm run db:create` would (utf8mb4, binary
        // collation), and grants on that database only.
        const init = dependencies(service).find((dependency) => compose.services[dependency]?.entrypoint !== undefined);
        const scriptMount = ((compose.services[init ?? '']?.volumes ?? []) as string[]).find((m) => m.split(':')[0]!.endsWith('.sh'));
        assert.ok(scriptMount !== undefined, `${name} waits for no init script`);
        const script = readFileSync(join(root, scriptMount.split(':')[0]!), 'utf8');
        assert.ok(
          script.includes(createDatabaseStatement(settings.database)),
          `${scriptMount} does not create the database as db:create does`,
        );
        const grants = [...script.matchAll(/^GRANT (.*) ON (\S+) TO (.*)$/gm)];
        assert.deepEqual(
          grants.map((m) => m[2]),
          [`\\\`${settings.database}\\\`.*`],
          'privileges on the database only',
        );
        for (const [statement, privileges, , rest] of grants) {
          assert.doesNotMatch(privileges!, /\bALL\b/, statement);
          assert.doesNotMatch(rest!, /GRANT OPTION/, statement);
        }
      } else {
        assert.match(config.databaseUrl, /^postgres(ql)?:\/\//);
        assert.notEqual(database.username, 'postgres', 'the app must not log in as the superuser');
        assert.equal(decodeURIComponent(database.password), envExample.APP_DB_PASSWORD);
      }

      const amqp = new URL(containerEnv.AMQP_URL ?? 'missing:');
      assert.equal(amqp.protocol, 'amqp:', `AMQP_URL is ${containerEnv.AMQP_URL}`);
      assert.ok(dependencies(service).includes(amqp.hostname), `${name} does not wait for ${amqp.hostname}`);
      assert.equal(decodeURIComponent(amqp.password), envExample.RABBITMQ_PASSWORD);
    });
  }

  test('every secret is required: no default, and a clear message naming it when it is missing', () => {
    for (const secret of SECRETS) {
      const operators = referencesTo(composeText, secret);
      assert.ok(operators.length > 0, `${secret} is not used`);
      assert.deepEqual(new Set(operators), new Set([':?']), `${secret} must always be written \${${secret}:?message}`);

      for (const missing of [
        { ...firstStartEnv, [secret]: undefined },
        { ...firstStartEnv, [secret]: '' },
      ]) {
        assert.throws(
          () => renderCompose(composeText, missing),
          (error: unknown) =>
            error instanceof MissingVariableError &&
            error.variable === secret &&
            error.message.includes(secret) &&
            error.detail.includes('.env'),
        );
      }
    }
  });

  test('.env.example gives every required variable a value, and documents no required one that is unused', () => {
    assert.ok(existsSync(envExamplePath), '.env.example is missing');
    assert.deepEqual(required, [...SECRETS].sort(), 'the required variables are the secrets');
    for (const name of required) assert.ok((envExample[name] ?? '') !== '', `.env.example has no value for ${name}`);
    for (const name of Object.keys(envExample))
      assert.ok(referencesTo(composeText, name).length > 0, `${name} in .env.example is not used`);
  });

  test('SQL Server and MariaDB are published on the loopback interface only, and the databases keep their data in named volumes', () => {
    for (const name of ['mssql', 'mariadb']) {
      const ports = (compose.services[name]?.ports ?? []) as string[];
      assert.ok(ports.length > 0, `${name} publishes no port`);
      for (const port of ports) assert.match(String(port), /^127\.0\.0\.1:/, `${name} publishes ${port}`);
    }
    const volumes = Object.keys(compose.volumes ?? {});
    for (const [name, path] of [
      ['mssql', '/var/opt/mssql'],
      ['postgres', '/var/lib/postgresql/data'],
      ['mariadb', '/var/lib/mysql'],
      ['rabbitmq', '/var/lib/rabbitmq'],
    ] as const) {
      const mounts = (compose.services[name]?.volumes ?? []) as string[];
      const mount = mounts.find((m) => m.split(':')[1] === path);
      assert.ok(mount !== undefined && volumes.includes(mount.split(':')[0]!), `${name} keeps ${path} in no named volume`);
    }
  });
});

describe('the proxies: HTTPS only on the published port, /metrics kept inside', () => {
  const compose = renderCompose(composeText, firstStartEnv);
  const proxies = Object.entries(compose.services).filter(([, service]) => String(service.image ?? '').startsWith('nginx:'));

  test('there is a proxy per variant', () => {
    assert.deepEqual(proxies.map(([name]) => name).sort(), ['proxy', 'proxy-mysql', 'proxy-pg']);
  });

  for (const [name, service] of proxies) {
    const mounts = (service.volumes ?? []) as string[];
    const confMount = mounts.find((m) => m.endsWith(':/etc/nginx/conf.d/default.conf:ro'));
    const conf = readFileSync(join(root, confMount!.split(':')[0]!), 'utf8');
    const servers = conf.split(/^server \{$/m).slice(1);

    test(`${name}: the published port is the TLS listener, with the certificate from TLS_CERT_DIR`, () => {
      const ports = (service.ports ?? []) as string[];
      assert.deepEqual(ports, ['3000:8443'], 'one published port, the HTTPS listener');
      const tls = servers.find((server) => /^\s*listen 8443 ssl;/m.test(server));
      assert.ok(tls !== undefined, 'no `listen 8443 ssl` server');
      const certDir = mounts.find((m) => m.endsWith(':/etc/nginx/tls:ro'));
      assert.equal(certDir, './deploy/tls:/etc/nginx/tls:ro', 'certificates come from TLS_CERT_DIR, ./deploy/tls by default');
      assert.equal(referencesTo(composeText, 'TLS_CERT_DIR').length > 0, true);
      assert.match(tls, /ssl_certificate\s+\/etc\/nginx\/tls\/cert\.pem;/);
      assert.match(tls, /ssl_certificate_key\s+\/etc\/nginx\/tls\/key\.pem;/);
      for (const server of servers) {
        const listens = [...server.matchAll(/^\s*listen (\d+)/gm)].map((m) => m[1]);
        for (const port of listens) {
          assert.ok(port === '8443' || !ports.some((p) => p.endsWith(`:${port}`)), `plain port ${port} is published`);
        }
      }
    });

    test(`${name}: it proxies to the replicas of the app service it waits for`, () => {
      const upstreams = new Set([...conf.matchAll(/set \$upstream http:\/\/([^:;]+):(\d+);/g)].map((m) => `${m[1]}:${m[2]}`));
      const app = dependencies(service).filter((dependency) => compose.services[dependency]?.build !== undefined);
      assert.equal(app.length, 1, `${name} waits for ${JSON.stringify(dependencies(service))}`);
      assert.deepEqual([...upstreams], [`${app[0]}:3000`]);
    });

    test(`${name}: /metrics is refused on the public listener, and the proxy forwards X-Forwarded-For`, () => {
      const tls = servers.find((server) => /listen 8443 ssl;/.test(server))!;
      assert.match(tls, /location = \/metrics \{[^}]*return 404/);
      assert.match(tls, /proxy_set_header X-Forwarded-For \$proxy_add_x_forwarded_for;/);
      const health = (service.healthcheck as { test: string[] }).test.join(' ');
      const internal = servers.find((server) => !/ssl;/.test(server))!;
      assert.match(health, /http:\/\/127\.0\.0\.1:8080\/health\/live/);
      assert.match(internal, /location = \/health\/live/);
      assert.doesNotMatch(
        internal,
        /location = \/metrics|location \/ \{[^}]*proxy_pass/,
        'the internal listener serves the health check only',
      );
    });
  }

  test('deploy/make-self-signed-cert.sh writes the cert.pem and key.pem the proxies read', () => {
    const dir = mkdtempSync(join(tmpdir(), 'tls-'));
    try {
      const result = spawnSync('sh', [join(root, 'deploy/make-self-signed-cert.sh'), dir, 'inventory.example'], {
        encoding: 'utf8',
        timeout: 60_000,
      });
      assert.equal(result.status, 0, result.stderr);
      const cert = readFileSync(join(dir, 'cert.pem'), 'utf8');
      const key = readFileSync(join(dir, 'key.pem'), 'utf8');
      assert.match(cert, /^-----BEGIN CERTIFICATE-----/);
      assert.match(key, /^-----BEGIN PRIVATE KEY-----/);
      const x509 = new X509Certificate(cert);
      assert.match(x509.subjectAltName ?? '', /DNS:inventory\.example/);
      assert.ok(x509.checkPrivateKey(createPrivateKey(key)), 'the key belongs to the certificate');
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });
});

describe('the monitoring profile: a Prometheus that scrapes every replica and loads the alert rules', () => {
  const compose = renderCompose(composeText, firstStartEnv);
  const service = compose.services.prometheus;
  const mounts = ((service?.volumes ?? []) as string[]).map((m) => {
    const [source, target, mode] = m.split(':') as [string, string, string | undefined];
    return { source, target, mode };
  });
  const flag = (name: string) => ((service?.command ?? []) as string[]).find((arg) => arg.startsWith(`--${name}=`))?.slice(name.length + 3);
  const configPath = flag('config.file');
  const configMount = mounts.find((m) => m.target === configPath);
  const config = parseYaml(readFileSync(join(root, configMount?.source ?? 'missing'), 'utf8')) as {
    rule_files: string[];
    scrape_configs: { job_name: string; metrics_path?: string; dns_sd_configs?: { names: string[]; type: string; port: number }[] }[];
  };

  test('prometheus runs in the monitoring profile only, from a pinned image, its data in a named volume', () => {
    assert.ok(service !== undefined, 'no prometheus service');
    assert.deepEqual(service.profiles, ['monitoring']);
    assert.match(String(service.image), /^prom\/prometheus:v\d+\.\d+\.\d+$/, 'a fixed release, not latest');
    const data = mounts.find((m) => m.target === flag('storage.tsdb.path'));
    assert.ok(data !== undefined && Object.keys(compose.volumes ?? {}).includes(data.source), 'its TSDB is in no named volume');
    assert.ok(service.healthcheck !== undefined && service.mem_limit !== undefined && service.logging !== undefined);
  });

  test("its configuration and the rules are the repository's files, mounted read-only where the configuration looks for them", () => {
    assert.ok(configMount !== undefined, `--config.file=${configPath} is not mounted`);
    assert.equal(configMount.source, './deploy/prometheus/prometheus.yml');
    for (const ruleFile of config.rule_files) {
      // Prometheus reads a relative rule file from the configuration file's directory.
      const inContainer = posix.resolve(posix.dirname(configPath!), ruleFile);
      const mount = mounts.find((m) => m.target === inContainer);
      assert.ok(mount !== undefined, `${inContainer} is not mounted`);
      assert.equal(mount.mode, 'ro');
      assert.ok(existsSync(join(root, mount.source)), `${mount.source} does not exist`);
      assert.equal(mount.source, './deploy/prometheus/alerts.yml');
    }
    assert.equal(configMount.mode, 'ro');
  });

  test('its UI is published on loopback only', () => {
    const ports = (service?.ports ?? []) as string[];
    assert.ok(ports.length > 0);
    for (const port of ports) assert.match(port, /^127\.0\.0\.1:\d+:9090$/);
  });

  test("it scrapes every app service of the file (not the proxies) on the port the replicas listen on, under the rules' job", () => {
    const apps = Object.entries(compose.services)
      .filter(([, s]) => s.build !== undefined)
      .map(([name, s]) => ({ name, port: Number(serviceEnvironment(s, firstStartEnv).PORT ?? runtimeStage.env.PORT ?? 3000) }));
    assert.equal(config.scrape_configs.length, 1);
    const [job] = config.scrape_configs;
    assert.equal(job!.metrics_path ?? '/metrics', '/metrics');
    const discovered = (job!.dns_sd_configs ?? []).flatMap((d) => d.names.map((name) => ({ name, port: d.port, type: d.type })));
    assert.deepEqual(discovered.map((d) => d.name).sort(), apps.map((a) => a.name).sort());
    for (const { name, port } of apps) {
      const target = discovered.find((d) => d.name === name)!;
      assert.equal(target.type, 'A', 'one address per replica');
      assert.equal(target.port, port, `${name} listens on ${port}`);
    }
    const rulesText = readFileSync(join(root, 'deploy/prometheus/alerts.yml'), 'utf8');
    assert.deepEqual(new Set([...rulesText.matchAll(/\bjob="([^"]+)"/g)].map((m) => m[1])), new Set([job!.job_name]));
  });
});

test('the `docker compose up` commands in the README and docs start services the file has, with their profile', () => {
  const compose = renderCompose(composeText, firstStartEnv);
  const commands = ['README.md', 'docs/operations.md', 'docs/deploy.md', 'docker-compose.yml'].flatMap((file) =>
    [...readFileSync(join(root, file), 'utf8').matchAll(/docker compose ([^\n#`]*\bup\b[^\n#`]*)/g)].map((m) => ({
      file,
      words: m[1]!.trim().split(/\s+/),
    })),
  );
  assert.ok(commands.length >= 4, `found ${commands.length} commands`);
  for (const { file, words } of commands) {
    const profiles = words.flatMap((word, i) => (words[i - 1] === '--profile' ? [word] : []));
    const named = words.slice(words.indexOf('up') + 1).filter((word) => !word.startsWith('-'));
    const started =
      named.length > 0 ? named : Object.keys(compose.services).filter((name) => compose.services[name]!.profiles === undefined);
    for (const name of started) {
      const service = compose.services[name];
      assert.ok(service !== undefined, `${file}: \`docker compose ${words.join(' ')}\` names ${name}, which the file lacks`);
      for (const profile of service.profiles ?? []) {
        assert.ok(profiles.includes(profile), `${file}: \`docker compose ${words.join(' ')}\` starts ${name} without --profile ${profile}`);
      }
    }
  }
});

const composeBinary = spawnSync('docker-compose', ['version'], { stdio: 'ignore' }).status === 0;

describe('docker-compose config agrees', { skip: composeBinary ? false : 'docker-compose is not installed' }, () => {
  const dir = mkdtempSync(join(tmpdir(), 'compose-test-'));
  after(() => rmSync(dir, { recursive: true, force: true }));

  /** Runs `docker-compose config` with only an env file: no variable from this shell leaks in. */
  function composeConfig(env: Env, profile?: string): { status: number | null; stdout: string; stderr: string } {
    const envFile = join(dir, `env-${Math.random().toString(36).slice(2)}`);
    writeFileSync(
      envFile,
      Object.entries(env)
        .filter(([, v]) => v !== undefined)
        .map(([k, v]) => `${k}=${v}\n`)
        .join(''),
    );
    const args = ['--env-file', envFile, '-f', join(root, 'docker-compose.yml'), ...(profile ? ['--profile', profile] : []), 'config'];
    const result = spawnSync('docker-compose', args, { encoding: 'utf8', env: { PATH: process.env.PATH }, timeout: 60_000 });
    return { status: result.status, stdout: result.stdout, stderr: result.stderr };
  }

  for (const profile of [undefined, 'postgres', 'mariadb']) {
    test(`the app services' environment is the one rendered above (${profile ?? 'default'} variant)`, () => {
      const result = composeConfig(firstStartEnv, profile);
      assert.equal(result.status, 0, result.stderr);
      const rendered = parseYaml(result.stdout) as ComposeFile;
      const ours = renderCompose(composeText, firstStartEnv);
      // A profile adds its services to the default ones.
      const apps = appServices(ours).filter((s) => s.variant === 'default' || s.variant === profile);
      for (const { name } of apps) {
        assert.deepEqual(serviceEnvironment(rendered.services[name]!, {}), serviceEnvironment(ours.services[name]!, firstStartEnv), name);
      }
    });
  }

  test('--profile monitoring: docker-compose renders prometheus with the files of this repository, UI on loopback', () => {
    const result = composeConfig(firstStartEnv, 'monitoring');
    assert.equal(result.status, 0, result.stderr);
    const prometheus = (parseYaml(result.stdout) as ComposeFile).services.prometheus;
    assert.ok(prometheus !== undefined, 'no prometheus service rendered');
    assert.deepEqual(prometheus.volumes, [
      `${join(root, 'deploy/prometheus/prometheus.yml')}:/etc/prometheus/prometheus.yml:ro`,
      `${join(root, 'deploy/prometheus/alerts.yml')}:/etc/prometheus/alerts.yml:ro`,
      'prometheus-data:/prometheus:rw',
    ]);
    assert.deepEqual(prometheus.ports, ['127.0.0.1:9090:9090/tcp']);
  });

  test('a missing secret stops docker-compose with the message naming it', () => {
    const result = composeConfig({ ...firstStartEnv, ADMIN_TOKEN: undefined });
    assert.notEqual(result.status, 0);
    assert.match(result.stderr, /ADMIN_TOKEN in \.env/);
  });
});

describe('the image', () => {
  const packageJson = JSON.parse(readFileSync(join(root, 'package.json'), 'utf8')) as {
    dependencies: Record<string, string>;
    devDependencies: Record<string, string>;
    scripts: Record<string, string>;
  };
  const outDir = (JSON.parse(readFileSync(join(root, 'tsconfig.build.json'), 'utf8')) as { compilerOptions: { outDir: string } })
    .compilerOptions.outDir;
  const dir = mkdtempSync(join(tmpdir(), 'image-test-'));
  let build: SpawnSyncReturns<string>;
  // npm run build, into a directory laid out like the runtime stage's WORKDIR.
  before(() => {
    build = spawnSync('npm', ['run', 'build', '--', '--outDir', join(dir, outDir)], { cwd: root, encoding: 'utf8', timeout: 120_000 });
  });
  after(() => rmSync(dir, { recursive: true, force: true }));

  /** The runtime stage's start command, as a path inside the image. */
  function startScript(): string {
    const command = [...(runtimeStage.entrypoint ?? []), ...(runtimeStage.cmd ?? [])];
    assert.equal(command[0], 'node', `the image starts ${JSON.stringify(command)}`);
    const script = command.find((arg, i) => i > 0 && !arg.startsWith('-'));
    assert.ok(script !== undefined, `no script in ${JSON.stringify(command)}`);
    return posix.resolve(runtimeStage.workdir, script);
  }

  test("the start command's entry point is in the build's output, copied where the command looks", () => {
    const buildStage = parseDockerfile(join(root, 'Dockerfile')).find((s) => s.name === runtimeStage.copies.find((c) => c.from)?.from);
    assert.ok(buildStage !== undefined, 'the runtime stage copies from no build stage');
    assert.ok(
      buildStage.runs.some((run) => /\bnpm run build\b/.test(run)),
      'the build stage does not run npm run build',
    );
    const copy = runtimeStage.copies.find((c) => c.from === buildStage.name)!;
    assert.deepEqual(
      copy.sources.map((s) => posix.resolve(buildStage.workdir, s)),
      [posix.resolve(buildStage.workdir, outDir)],
    );
    const copiedTo = posix.resolve(runtimeStage.workdir, copy.destination);
    const script = startScript();
    assert.ok(script.startsWith(`${copiedTo}/`), `${script} is not under ${copiedTo}`);

    assert.equal(build.status, 0, build.stdout + build.stderr);
    assert.ok(existsSync(join(dir, posix.relative(runtimeStage.workdir, script))), `the build emits no ${script}`);
  });

  test('the build output imports production dependencies only (the runtime stage installs no others)', () => {
    assert.ok(
      runtimeStage.runs.some((run) => /npm ci\b.*--omit=dev/.test(run)),
      'the runtime stage installs dev dependencies',
    );
    assert.equal(build.status, 0, build.stdout + build.stderr);
    assert.equal(packageJson.dependencies.tsx, undefined, 'tsx is a dev dependency: the image runs compiled JavaScript');
    assert.ok(packageJson.devDependencies.tsx !== undefined && /\btsx\b/.test(packageJson.scripts.start ?? ''), 'npm start runs tsx');
    const files = readdirSync(join(dir, outDir), { recursive: true, encoding: 'utf8' }).filter((f) => f.endsWith('.js'));
    assert.ok(files.length > 10, `only ${files.length} files built`);
    const imported = new Set<string>();
    for (const file of files) {
      const code = readFileSync(join(dir, outDir, file), 'utf8');
      // Static imports and re-exports (a statement at the start of a line, over lines), dynamic imports;
      // not a `from "table"` inside an SQL text.
      for (const match of code.matchAll(/(?:^(?:import|export)\b[^'"]*?\bfrom\s*|\bimport\s*\(\s*|^import\s*)['"]([^'"]+)['"]/gm)) {
        const specifier = match[1]!;
        if (/^(\.|\/|node:)/.test(specifier) || builtinModules.includes(specifier)) continue;
        // The console bundles itself with esbuild only when run from the sources; the build writes the
        // bundle it reads instead, so the compiled service never reaches that import.
        if (specifier === 'esbuild' && file === join('admin', 'assets.js')) {
          assert.ok(existsSync(join(dir, outDir, 'console', 'ui-bundle', 'console.js')), 'the build wrote no console bundle');
          continue;
        }
        const parts = specifier.split('/');
        imported.add(specifier.startsWith('@') ? parts.slice(0, 2).join('/') : parts[0]!);
      }
    }
    assert.ok(imported.has('fastify'), `imports found: ${[...imported].join(', ')}`);
    for (const name of imported)
      assert.ok(packageJson.dependencies[name] !== undefined, `${name} is imported at run time but not a dependency`);
  });

  test("the image's Node satisfies every production dependency's engines", () => {
    const version = /^node:(\d+)\.(\d+)\.(\d+)-/.exec(runtimeStage.from);
    assert.ok(version !== null, `the runtime image ${runtimeStage.from} is not a pinned node release`);
    const image = version.slice(1).map(Number);
    const lock = JSON.parse(readFileSync(join(root, 'package-lock.json'), 'utf8')) as {
      packages: Record<string, { dev?: boolean; optional?: boolean; engines?: { node?: string } }>;
    };
    const checked: string[] = [];
    for (const [path, entry] of Object.entries(lock.packages)) {
      const range = entry.engines?.node;
      if (path === '' || entry.dev || range === undefined) continue;
      // Simple lower bounds (">=22", ">= 16.0.0") are compared; other ranges are left to npm.
      const bound = /^>=\s*(\d+)(?:\.(\d+))?(?:\.(\d+))?$/.exec(range.trim());
      if (bound === null) continue;
      const min = bound.slice(1).map((n) => Number(n ?? 0));
      const ok = image[0]! !== min[0]! ? image[0]! > min[0]! : image[1]! !== min[1]! ? image[1]! > min[1]! : image[2]! >= min[2]!;
      assert.ok(ok, `${path} needs node ${range}; the image has ${image.join('.')}`);
      checked.push(path);
    }
    assert.ok(checked.includes('node_modules/kysely'), `checked: ${checked.join(', ')}`);
  });

  test("the inbox's public entries, built: package.json exports resolve by the package's name, each with its types", () => {
    assert.equal(build.status, 0, build.stdout + build.stderr);
    const manifest = JSON.parse(readFileSync(join(root, 'package.json'), 'utf8')) as {
      name: string;
      exports: Record<string, { types: string; default: string }>;
    };
    assert.deepEqual(Object.keys(manifest.exports), ['./inbox', './inbox/machinery', './inbox/fastify', './inbox/amqp']);
    for (const [entry, target] of Object.entries(manifest.exports)) {
      assert.ok(existsSync(join(dir, target.default)), `${entry}: the build emits no ${target.default}`);
      assert.ok(existsSync(join(dir, target.types)), `${entry}: the build emits no ${target.types}`);
    }
    // A module inside the package imports it by name, as an application that installed it would.
    copyFileSync(join(root, 'package.json'), join(dir, 'package.json'));
    if (!existsSync(join(dir, 'node_modules'))) symlinkSync(join(root, 'node_modules'), join(dir, 'node_modules'), 'dir');
    const probe = join(dir, 'public-entries.mjs');
    writeFileSync(
      probe,
      [
        `const core = await import('${manifest.name}/inbox');`,
        `const machinery = await import('${manifest.name}/inbox/machinery');`,
        `const fastify = await import('${manifest.name}/inbox/fastify');`,
        `const amqp = await import('${manifest.name}/inbox/amqp');`,
        'console.log(JSON.stringify([typeof core.InboxStore, typeof core.inboxMigrations, typeof machinery.claimTransaction, typeof fastify.inbox, typeof amqp.CommandConsumer]));',
      ].join('\n'),
    );
    const run = spawnSync(process.execPath, [probe], { cwd: dir, encoding: 'utf8', timeout: 30_000 });
    assert.equal(run.status, 0, run.stderr);
    assert.deepEqual(JSON.parse(run.stdout), ['function', 'object', 'function', 'function', 'function']);
  });

  test('the start command runs the built service: it listens, is ready, and exits 0 on SIGTERM', async (t) => {
    startScript(); // asserts that the command is node with a script
    assert.equal(build.status, 0, build.stdout + build.stderr);
    // The runtime stage's WORKDIR holds package.json (ESM), node_modules and the build output.
    copyFileSync(join(root, 'package.json'), join(dir, 'package.json'));
    if (!existsSync(join(dir, 'node_modules'))) symlinkSync(join(root, 'node_modules'), join(dir, 'node_modules'), 'dir');
    const command = [...(runtimeStage.entrypoint ?? []), ...(runtimeStage.cmd ?? [])];
    // A fresh PostgreSQL database when there is a server (quick to start); embedded PGlite otherwise.
    const database = await postgresDatabase?.open();
    t.after(() => database?.close());
    const child = spawn(process.execPath, command.slice(1), {
      cwd: dir,
      // The image's ENV, then loopback and a test database.
      env: {
        PATH: process.env.PATH,
        ...runtimeStage.env,
        HOST: '127.0.0.1',
        PORT: '0',
        DATABASE_URL: database?.url ?? 'pglite:memory',
        EMAIL_LOG_FILE: join(dir, 'emails.jsonl'),
      },
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    let output = '';
    child.stdout.on('data', (chunk: Buffer) => (output += chunk.toString()));
    child.stderr.on('data', (chunk: Buffer) => (output += chunk.toString()));
    const exited = once(child, 'exit');
    try {
      const url = await new Promise<string>((resolve, reject) => {
        // Bounded, with room for a busy machine: the check is that it starts, not how fast.
        const timer = setTimeout(() => reject(new Error(`not listening after 60 s:\n${output}`)), 60_000);
        const poll = setInterval(() => {
          const match = /Server listening at (http:\/\/127\.0\.0\.1:\d+)/.exec(output);
          if (match) {
            clearInterval(poll);
            clearTimeout(timer);
            resolve(match[1]!);
          }
        }, 50);
        child.once('exit', (code) => {
          clearInterval(poll);
          clearTimeout(timer);
          reject(new Error(`exited with ${code} before listening:\n${output}`));
        });
      });
      const ready = await fetch(`${url}/health/ready`, { signal: AbortSignal.timeout(10_000) });
      assert.equal(ready.status, 200, await ready.text());
    } finally {
      if (child.exitCode === null) child.kill('SIGTERM');
    }
    const kill = setTimeout(() => child.kill('SIGKILL'), 15_000);
    const [code] = (await exited) as [number | null];
    clearTimeout(kill);
    assert.equal(code, 0, output);
  });
});

const nginxBinary = ['/usr/sbin/nginx', '/usr/bin/nginx'].find((path) => existsSync(path));

describe('deploy/nginx.conf in a real nginx, on loopback ports', { skip: nginxBinary ? false : 'nginx is not installed' }, () => {
  const dir = mkdtempSync(join(tmpdir(), 'proxy-test-'));
  const key = 'proxy-test-orders-key-0123456789abcdef0123';
  let app: FastifyInstance;
  let database: TestDatabaseHandle;
  let nginx: ChildProcess | undefined;
  let appPort: number;
  let httpsPort: number;
  let internalPort: number;
  let cert: string;

  before(async () => {
    database = await testDatabases[0]!.open();
    // No ADMIN_TOKEN: the proxy's X-Forwarded-For must keep the admin routes closed anyway.
    app = await testApp(database, {
      config: {
        adminToken: undefined,
        producers: [{ id: 'orders', apiKeySha256: [apiKeyDigest(key)], webhookSecrets: [], rateLimitMax: undefined }],
      },
    });
    await app.listen({ port: 0, host: '127.0.0.1' });
    appPort = (app.server.address() as AddressInfo).port;
    [httpsPort, internalPort] = [await freePort(), await freePort()];
    const made = spawnSync('sh', [join(root, 'deploy/make-self-signed-cert.sh'), join(dir, 'tls'), 'localhost'], { encoding: 'utf8' });
    assert.equal(made.status, 0, made.stderr);
    cert = readFileSync(join(dir, 'tls', 'cert.pem'), 'utf8');
    // The file as mounted, with only the addresses changed: loopback ports, this replica, the certificate's path.
    const site = readFileSync(join(root, 'deploy/nginx.conf'), 'utf8')
      .replace(/^(\s*)listen 8443 ssl;/m, `$1listen 127.0.0.1:${httpsPort} ssl;`)
      .replace(/^(\s*)listen 8080;/m, `$1listen 127.0.0.1:${internalPort};`)
      .replaceAll('http://app:3000', `http://127.0.0.1:${appPort}`)
      .replaceAll('/etc/nginx/tls/', `${dir}/tls/`);
    assert.ok(!/listen (8443|8080)/.test(site), 'every listener was moved to loopback');
    writeFileSync(join(dir, 'site.conf'), site);
    const temp = ['client_body', 'proxy', 'fastcgi', 'uwsgi', 'scgi'].map((t) => `${t}_temp_path ${dir}/${t};`).join(' ');
    writeFileSync(
      join(dir, 'nginx.conf'),
      `daemon off; pid ${dir}/nginx.pid; error_log stderr; events {} http { access_log off; ${temp} include ${dir}/site.conf; }\n`,
    );
    nginx = spawn(nginxBinary!, ['-c', join(dir, 'nginx.conf'), '-p', dir, '-e', join(dir, 'error.log')], {
      stdio: ['ignore', 'ignore', 'pipe'],
    });
    let stderr = '';
    nginx.stderr!.on('data', (chunk: Buffer) => (stderr += chunk.toString()));
    const deadline = Date.now() + 20_000;
    for (;;) {
      const answered = await request('GET', `https://localhost:${httpsPort}/health/live`).then(
        () => true,
        () => false,
      );
      if (answered) break;
      assert.ok(nginx.exitCode === null, `nginx exited: ${stderr}`);
      assert.ok(Date.now() < deadline, `nginx did not answer in 20 s: ${stderr}`);
      await new Promise((resolve) => setTimeout(resolve, 100));
    }
  });
  after(async () => {
    if (nginx !== undefined && nginx.exitCode === null) {
      nginx.kill('SIGTERM');
      await once(nginx, 'exit');
    }
    await app?.close();
    await database?.close();
    rmSync(dir, { recursive: true, force: true });
  });

  function request(
    method: string,
    url: string,
    body?: string,
    headers: Record<string, string> = {},
  ): Promise<{ status: number; headers: Record<string, unknown>; body: string }> {
    const target = new URL(url);
    const send = target.protocol === 'https:' ? httpsRequest : httpRequest;
    return new Promise((resolve, reject) => {
      const req = send(
        target,
        {
          method,
          headers: { ...(body === undefined ? {} : { 'content-type': 'application/json' }), ...headers },
          ca: cert,
          timeout: 10_000,
        },
        (res) => {
          let text = '';
          res.on('data', (chunk: Buffer) => (text += chunk.toString()));
          res.on('end', () => resolve({ status: res.statusCode ?? 0, headers: res.headers, body: text }));
        },
      );
      req.on('error', reject);
      req.on('timeout', () => req.destroy(new Error('timed out')));
      req.end(body);
    });
  }

  test('HTTPS with the mounted certificate; commands need a producer key through it', async () => {
    const ready = await request('GET', `https://localhost:${httpsPort}/health/ready`);
    assert.equal(ready.status, 200, ready.body);
    const book = newId();
    const message = JSON.stringify({ messageId: `m-${newId()}`, data: { orderId: newId(), bookId: book, quantity: 1 } });
    const anonymous = await request('POST', `https://localhost:${httpsPort}/inventory/order-placed`, message);
    assert.equal(anonymous.status, 401, anonymous.body);
    const signedIn = await request('POST', `https://localhost:${httpsPort}/inventory/order-placed`, message, {
      authorization: `Bearer ${key}`,
    });
    assert.equal(signedIn.status, 201, signedIn.body);
    // nginx answers plain HTTP on its TLS port with a 400 and passes nothing on.
    const plain = await request('GET', `http://localhost:${httpsPort}/health/live`);
    assert.equal(plain.status, 400, 'no plain HTTP on the TLS port');
  });

  test('/metrics is refused on the public listener; the internal one serves the health check only', async () => {
    assert.equal((await request('GET', `http://127.0.0.1:${appPort}/metrics`)).status, 200);
    for (const path of ['/metrics', '//metrics', '/%6Detrics', '/metrics?format=json']) {
      const res = await request('GET', `https://localhost:${httpsPort}${path}`);
      assert.equal(res.status, 404, `${path}: ${res.body}`);
      assert.match(String(res.headers['content-type']), /^application\/problem\+json/);
      assert.doesNotMatch(res.body, /# HELP/);
    }
    assert.equal((await request('GET', `http://127.0.0.1:${internalPort}/health/live`)).status, 200);
    assert.equal((await request('GET', `http://127.0.0.1:${internalPort}/metrics`)).status, 404);
    assert.equal((await request('GET', `http://127.0.0.1:${internalPort}/dead-letters`)).status, 404);
  });

  test('through the proxy, a loopback peer gets no admin trust (the proxy adds X-Forwarded-For)', async () => {
    const direct = await request('GET', `http://127.0.0.1:${appPort}/dead-letters`);
    assert.equal(direct.status, 200, 'a direct loopback client is trusted');
    const proxied = await request('GET', `https://localhost:${httpsPort}/dead-letters`);
    assert.equal(proxied.status, 403, proxied.body);
    assert.match(proxied.body, /proxy/);
  });
});
