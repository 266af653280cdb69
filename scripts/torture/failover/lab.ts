/**
 * The failover mode's servers, all on loopback and all of this run's own: one etcd, two Patroni nodes
 * each with a PostgreSQL 15 (a primary and a standby, synchronous or not), haproxy in front of them
 * (the leader only, by Patroni's REST check) and in front of a cluster of three RabbitMQ nodes. Every
 * process is stopped at the end (onCleanup / ThrowawayServer), and the lab's directory deleted unless kept.
 *
 * Why haproxy and not a multi-host connection string: node-postgres (pg 8) connects to one host and has
 * no target_session_attrs, so it cannot pick the writable server of several. haproxy asks each node's
 * Patroni (GET /primary: 200 on the leader only) every 500 ms and, when the leader changes, closes the
 * sessions to the node it marked down, so the pool reconnects to the new leader.
 */
import type { ChildProcess } from 'node:child_process';
import { execFileSync, spawnSync } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { chmodSync, chownSync, createWriteStream, existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { freePort } from '../../free-port.js';
import { say } from '../log.js';
import { onCleanup, spawnTracked, ThrowawayServer } from '../processes.js';

const PG_BIN = '/usr/lib/postgresql/15/bin';

export interface Member {
  name: string;
  role: string;
  state: string;
  lag?: number | string;
  timeline?: number;
}

/** One Patroni node and its PostgreSQL. */
export class PostgresNode {
  child: ChildProcess | undefined;
  constructor(
    readonly name: string,
    readonly dir: string,
    readonly pgPort: number,
    readonly restPort: number,
  ) {}

  get dataDir(): string {
    return join(this.dir, 'data');
  }

  /** The postmaster's pid, from its pid file; undefined when it is not running. */
  postmasterPid(): number | undefined {
    const file = join(this.dataDir, 'postmaster.pid');
    if (!existsSync(file)) return undefined;
    const pid = Number(readFileSync(file, 'utf8').split('\n')[0]);
    if (!Number.isSafeInteger(pid) || pid <= 0) return undefined;
    try {
      process.kill(pid, 0);
      return pid;
    } catch {
      return undefined;
    }
  }
}

function postgresUser(): { uid: number; gid: number } | undefined {
  if (process.getuid?.() !== 0) return undefined;
  const uid = Number(execFileSync('id', ['-u', 'postgres']).toString().trim());
  const gid = Number(execFileSync('id', ['-g', 'postgres']).toString().trim());
  return { uid, gid };
}

async function httpStatus(url: string): Promise<number | undefined> {
  try {
    const res = await fetch(url, { signal: AbortSignal.timeout(1000) });
    await res.arrayBuffer();
    return res.status;
  } catch {
    return undefined;
  }
}

export class FailoverLab {
  readonly dir: string;
  readonly nodes: PostgresNode[] = [];
  readonly rabbits: ThrowawayServer[] = [];
  private etcd: ChildProcess | undefined;
  private haproxy: ChildProcess | undefined;
  private readonly owner = postgresUser();
  private etcdPort = 0;
  private readonly scope = `torture-${randomBytes(3).toString('hex')}`;
  pgPort = 0;
  amqpPort = 0;

  constructor(
    readonly synchronous: boolean,
    private readonly keep: boolean,
  ) {
    this.dir = mkdtempSync(join(tmpdir(), 'torture-fo-'));
    // The postgres user must reach its nodes' directories inside.
    chmodSync(this.dir, 0o755);
    onCleanup(() => this.stopSync());
  }

  /** The service's database server: haproxy, which leads to the Patroni leader. */
  get pgUrl(): string {
    return `postgres://postgres@127.0.0.1:${this.pgPort}/postgres`;
  }

  /** The services' and clients' broker: haproxy in front of the three RabbitMQ nodes. */
  get amqpUrl(): string {
    return `amqp://guest:guest@127.0.0.1:${this.amqpPort}`;
  }

  private logStream(name: string, child: ChildProcess): void {
    const log = createWriteStream(join(this.dir, `${name}.log`), { flags: 'a' });
    log.on('error', () => {});
    child.stdout?.pipe(log, { end: false });
    child.stderr?.pipe(log, { end: false });
  }

  async start(): Promise<void> {
    await this.startEtcd();
    for (let i = 0; i < 2; i++) {
      const node = new PostgresNode(`pg${i}`, join(this.dir, `pg${i}`), await freePort(), await freePort());
      mkdirSync(node.dir, { mode: 0o700 });
      if (this.owner !== undefined) chownSync(node.dir, this.owner.uid, this.owner.gid);
      this.writePatroniConfig(node);
      this.nodes.push(node);
    }
    // The first bootstraps the cluster; the second clones it once there is a leader.
    this.startPatroni(this.nodes[0]!);
    await this.waitFor('a Patroni leader', 90_000, async () => (await this.leader()) !== undefined);
    this.startPatroni(this.nodes[1]!);
    await this.waitHealthy(120_000);
    await this.startRabbitCluster();
    await this.startHaproxy();
    // haproxy takes every server for up until its checks say otherwise (fall 2: about a second), so a
    // connection may reach the standby at first: wait until several in a row all reach the primary.
    let inARow = 0;
    await this.waitFor('haproxy to lead only to the leader', 30_000, async () => {
      const pg = await import('pg');
      const client = new pg.default.Client({ connectionString: this.pgUrl, connectionTimeoutMillis: 2000 });
      client.on('error', () => {});
      try {
        await client.connect();
        const { rows } = await client.query<{ r: boolean }>('select pg_is_in_recovery() as r');
        inARow = rows[0]?.r === false ? inARow + 1 : 0;
      } catch {
        inARow = 0;
      } finally {
        await client.end().catch(() => {});
      }
      return inARow >= 8;
    });
    say(
      `lab up in ${this.dir}: etcd :${this.etcdPort}, Patroni ${this.nodes.map((n) => `${n.name} pg :${n.pgPort} rest :${n.restPort}`).join(', ')}, ` +
        `haproxy pg :${this.pgPort} amqp :${this.amqpPort}, ${this.synchronous ? 'synchronous' : 'asynchronous'} replication`,
    );
  }

  private async startEtcd(): Promise<void> {
    this.etcdPort = await freePort();
    const peer = await freePort();
    const child = spawnTracked(
      'etcd',
      [
        '--name=e0',
        `--data-dir=${join(this.dir, 'etcd')}`,
        `--listen-client-urls=http://127.0.0.1:${this.etcdPort}`,
        `--advertise-client-urls=http://127.0.0.1:${this.etcdPort}`,
        `--listen-peer-urls=http://127.0.0.1:${peer}`,
        `--initial-advertise-peer-urls=http://127.0.0.1:${peer}`,
        `--initial-cluster=e0=http://127.0.0.1:${peer}`,
        '--log-level=warn',
      ],
      { cwd: this.dir },
    );
    this.logStream('etcd', child);
    this.etcd = child;
    await this.waitFor('etcd', 30_000, async () => (await httpStatus(`http://127.0.0.1:${this.etcdPort}/version`)) === 200);
  }

  private writePatroniConfig(node: PostgresNode): void {
    // ttl 10 s, a loop each second; a crashed primary fails over at once (primary_start_timeout 0), and
    // a diverged old primary is rewound (wal_log_hints) or, failing that, cloned again.
    const yaml = `scope: ${this.scope}
name: ${node.name}
log:
  level: INFO
restapi:
  listen: 127.0.0.1:${node.restPort}
  connect_address: 127.0.0.1:${node.restPort}
etcd3:
  hosts: 127.0.0.1:${this.etcdPort}
bootstrap:
  dcs:
    ttl: 10
    loop_wait: 1
    retry_timeout: 3
    maximum_lag_on_failover: 16777216
    synchronous_mode: ${this.synchronous ? 'true' : 'false'}
    primary_start_timeout: 0
    postgresql:
      use_pg_rewind: true
      remove_data_directory_on_rewind_failure: true
      remove_data_directory_on_diverged_timelines: true
      parameters:
        wal_log_hints: 'on'
        max_connections: 200
        max_wal_senders: 10
        wal_keep_size: 256MB
        shared_buffers: 128MB
  initdb:
    - encoding: UTF8
    - locale: C
    - auth: trust
  pg_hba:
    - local all all trust
    - host replication all 127.0.0.1/32 trust
    - host all all 127.0.0.1/32 trust
postgresql:
  listen: 127.0.0.1:${node.pgPort}
  connect_address: 127.0.0.1:${node.pgPort}
  data_dir: ${node.dataDir}
  bin_dir: ${PG_BIN}
  pgpass: ${join(node.dir, 'pgpass')}
  authentication:
    superuser: {username: postgres}
    replication: {username: postgres}
    rewind: {username: postgres}
  parameters:
    unix_socket_directories: ${node.dir}
`;
    const file = join(node.dir, 'patroni.yml');
    writeFileSync(file, yaml);
    if (this.owner !== undefined) chownSync(file, this.owner.uid, this.owner.gid);
  }

  /** Starts the node's Patroni (as the postgres user when this runs as root: the server refuses root). */
  startPatroni(node: PostgresNode): void {
    const child = spawnTracked('patroni', [join(node.dir, 'patroni.yml')], {
      cwd: node.dir,
      env: { PATH: process.env.PATH ?? '/usr/bin:/bin', HOME: node.dir, LANG: 'C.UTF-8' },
      ...(this.owner ?? {}),
    });
    this.logStream(`${node.name}-patroni`, child);
    node.child = child;
  }

  /** kill -9 of the node's Patroni: its PostgreSQL goes on running, without the agent that would demote it. */
  killPatroni(node: PostgresNode): void {
    node.child?.kill('SIGKILL');
  }

  /** kill -9 of the node's postmaster: PostgreSQL crashes, its Patroni stays. */
  killPostgres(node: PostgresNode): boolean {
    const pid = node.postmasterPid();
    if (pid === undefined) return false;
    process.kill(pid, 'SIGKILL');
    return true;
  }

  /** The pid of the node's WAL receiver (a standby streaming from the primary), if it has one. */
  async walReceiverPid(node: PostgresNode): Promise<number | undefined> {
    const pg = await import('pg');
    const client = new pg.default.Client({
      connectionString: `postgres://postgres@127.0.0.1:${node.pgPort}/postgres`,
      connectionTimeoutMillis: 3000,
    });
    client.on('error', () => {});
    try {
      await client.connect();
      const { rows } = await client.query<{ pid: number }>('select pid from pg_stat_wal_receiver');
      return rows[0]?.pid;
    } catch {
      return undefined;
    } finally {
      await client.end().catch(() => {});
    }
  }

  /** The node whose Patroni answers GET /primary with 200 (the leader, running as primary). */
  async leader(): Promise<PostgresNode | undefined> {
    for (const node of this.nodes) {
      if ((await httpStatus(`http://127.0.0.1:${node.restPort}/primary`)) === 200) return node;
    }
    return undefined;
  }

  /** The cluster as a live Patroni sees it. */
  async members(): Promise<Member[]> {
    for (const node of this.nodes) {
      try {
        const res = await fetch(`http://127.0.0.1:${node.restPort}/cluster`, { signal: AbortSignal.timeout(1000) });
        if (res.ok) return ((await res.json()) as { members: Member[] }).members;
      } catch {
        // that Patroni is down; ask the other
      }
    }
    return [];
  }

  /** Both nodes up, one leader, the other streaming (as the synchronous standby under synchronous replication). */
  async waitHealthy(timeoutMs: number): Promise<void> {
    await this.waitFor('both PostgreSQL nodes running and replicating', timeoutMs, async () => {
      const members = await this.members();
      const leader = members.filter((m) => m.role === 'leader' && m.state === 'running');
      const standby = members.filter(
        (m) => (this.synchronous ? m.role === 'sync_standby' : m.role !== 'leader') && /running|streaming/.test(m.state),
      );
      return members.length === 2 && leader.length === 1 && standby.length === 1;
    });
  }

  private async startRabbitCluster(): Promise<void> {
    const cookie = randomBytes(16).toString('hex').toUpperCase();
    for (let i = 0; i < 3; i++) {
      const node = new ThrowawayServer('rabbitmq-throwaway.sh', `torture-fo-rmq${i}-`, this.keep);
      await node.start({ RABBITMQ_THROWAWAY_COOKIE: cookie });
      this.rabbits.push(node);
    }
    const first = this.rabbits[0]!;
    const firstName = readFileSync(join(first.dir, 'nodename'), 'utf8').trim();
    for (const node of this.rabbits.slice(1)) {
      await node.ctl('stop_app');
      await node.ctl('join_cluster', firstName);
      await node.ctl('start_app');
    }
    const status = await first.ctl('cluster_status', '--formatter', 'json');
    const running = (JSON.parse(status) as { running_nodes?: string[] }).running_nodes ?? [];
    if (running.length !== 3) throw new Error(`the RabbitMQ cluster has ${running.length} running nodes: ${status.slice(0, 300)}`);
  }

  /** The RabbitMQ node that leads a quorum queue, if the cluster can say. */
  async queueLeader(queue: string): Promise<ThrowawayServer | undefined> {
    for (const node of this.rabbits) {
      try {
        const out = await node.ctl('list_queues', 'name', 'leader', '--formatter', 'json');
        const leader = (JSON.parse(out) as { name: string; leader?: string }[]).find((q) => q.name === queue)?.leader;
        return this.rabbits.find((r) => readFileSync(join(r.dir, 'nodename'), 'utf8').trim() === leader);
      } catch {
        // that node is down; ask another
      }
    }
    return undefined;
  }

  private async startHaproxy(): Promise<void> {
    this.pgPort = await freePort();
    this.amqpPort = await freePort();
    const rabbitPorts = this.rabbits.map((r) => Number(readFileSync(join(r.dir, 'port'), 'utf8').trim()));
    const config = `global
  maxconn 4000
defaults
  mode tcp
  timeout connect 2s
  timeout client 1h
  timeout server 1h
  timeout check 1s
listen postgres
  bind 127.0.0.1:${this.pgPort}
  option httpchk
  http-check send meth GET uri /primary
  http-check expect status 200
  default-server inter 500ms fall 2 rise 2 on-marked-down shutdown-sessions
${this.nodes.map((n) => `  server ${n.name} 127.0.0.1:${n.pgPort} check port ${n.restPort}`).join('\n')}
listen amqp
  bind 127.0.0.1:${this.amqpPort}
  balance roundrobin
  default-server inter 500ms fall 2 rise 2 on-marked-down shutdown-sessions
${rabbitPorts.map((p, i) => `  server rmq${i} 127.0.0.1:${p} check`).join('\n')}
`;
    const file = join(this.dir, 'haproxy.cfg');
    writeFileSync(file, config);
    const child = spawnTracked('haproxy', ['-db', '-f', file], { cwd: this.dir });
    this.logStream('haproxy', child);
    this.haproxy = child;
  }

  async waitFor(what: string, timeoutMs: number, check: () => Promise<boolean>): Promise<void> {
    const deadline = Date.now() + timeoutMs;
    while (Date.now() < deadline) {
      if (await check()) return;
      await sleep(250);
    }
    throw new Error(`timed out after ${timeoutMs / 1000} s waiting for ${what}; logs in ${this.dir}`);
  }

  /** A graceful stop: each Patroni stops its PostgreSQL; stopSync() ends whatever is left. */
  async stop(): Promise<void> {
    await Promise.all(
      this.nodes.map(async (node) => {
        const child = node.child;
        if (child === undefined || child.exitCode !== null || child.signalCode !== null) return;
        const exited = new Promise((resolve) => child.once('exit', resolve));
        child.kill('SIGTERM');
        await Promise.race([exited, sleep(30_000)]);
      }),
    );
  }

  /** Ends every process of the lab (PostgreSQL left running by a killed Patroni too) and, unless kept, deletes it. */
  stopSync(): void {
    for (const child of [this.haproxy, this.etcd, ...this.nodes.map((n) => n.child)]) {
      if (child !== undefined && child.exitCode === null && child.signalCode === null) child.kill('SIGKILL');
    }
    for (const node of this.nodes) {
      if (node.postmasterPid() === undefined) continue;
      const stop = [`${PG_BIN}/pg_ctl`, 'stop', '-m', 'immediate', '-w', '-t', '30', '-D', node.dataDir];
      const [command, args] = this.owner === undefined ? [stop[0]!, stop.slice(1)] : ['runuser', ['-u', 'postgres', '--', ...stop]];
      spawnSync(command, args, { stdio: 'ignore', timeout: 40_000, cwd: '/' });
    }
    if (!this.keep) rmSync(this.dir, { recursive: true, force: true });
  }
}
