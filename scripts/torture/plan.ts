/** What a run does: the command-line options, and each mode's variant sizes from flags and environment. */
import { randomBytes } from 'node:crypto';

export interface Options {
  amqp: boolean;
  /** The failover mode; `asynchronous`: its standby replicates asynchronously. */
  failover: boolean;
  asynchronous: boolean;
  /** The failover mode: before each primary kill, the standby's WAL receiver is stopped this long (0: not). */
  standbyLagMs: number;
  short: boolean;
  /** Keep the database, an own cluster or broker node, and the service logs. */
  keep: boolean;
  seed: number;
}

function flag(name: string): boolean {
  return process.argv.includes(`--${name}`);
}

function option(name: string): string | undefined {
  const i = process.argv.indexOf(`--${name}`);
  return i >= 0 ? process.argv[i + 1] : undefined;
}

export function readOptions(): Options {
  const seedOption = option('seed') ?? process.env.TORTURE_SEED;
  return {
    amqp: flag('amqp'),
    failover: flag('failover'),
    asynchronous: flag('async'),
    standbyLagMs: Number(option('lag') ?? process.env.TORTURE_STANDBY_LAG_MS ?? 0),
    short: flag('short') || process.env.TORTURE_SHORT === '1',
    keep: flag('keep') || process.env.TORTURE_KEEP === '1',
    seed: seedOption === undefined ? randomBytes(4).readUInt32BE() : Number(seedOption) >>> 0,
  };
}

function envNumber(name: string): number | undefined {
  const raw = process.env[name];
  if (raw === undefined || raw === '') return undefined;
  const value = Number(raw);
  if (!Number.isFinite(value) || value <= 0) throw new Error(`${name} must be a positive number, got "${raw}"`);
  return value;
}

/** The HTTP mode: at-least-once clients against several service processes. */
export interface Plan {
  variant: 'short' | 'long';
  trafficMs: number;
  /** After traffic stops, how long clients may take to get their last messages acknowledged. */
  drainMs: number;
  processes: number;
  clients: number;
  books: number;
  initialOnHand: [number, number];
  kills: number;
  connectionKills: number;
  pgRestarts: number;
  requestTimeoutMs: number;
  /** fast-check cases for test/fuzz.test.ts, run against the cluster after the traffic (0: skip). */
  fuzzRuns: number;
  /** Wall-clock bound on the whole run; the watchdog aborts past it. */
  hardLimitMs: number;
}

export function makePlan(short: boolean): Plan {
  const base: Plan = short
    ? {
        variant: 'short',
        trafficMs: 75_000,
        drainMs: 30_000,
        processes: 2,
        clients: 16,
        books: 10,
        initialOnHand: [15, 40],
        kills: 4,
        connectionKills: 5,
        pgRestarts: 0,
        requestTimeoutMs: 10_000,
        fuzzRuns: 0,
        hardLimitMs: 170_000,
      }
    : {
        variant: 'long',
        trafficMs: 630_000,
        drainMs: 45_000,
        processes: 3,
        clients: 24,
        books: 16,
        initialOnHand: [15, 40],
        kills: 24,
        connectionKills: 26,
        pgRestarts: 4,
        requestTimeoutMs: 10_000,
        fuzzRuns: 5000,
        hardLimitMs: 1_500_000,
      };
  const trafficS = envNumber('TORTURE_TRAFFIC_S');
  const clients = envNumber('TORTURE_CLIENTS');
  return {
    ...base,
    ...(trafficS === undefined ? {} : { trafficMs: trafficS * 1000, hardLimitMs: base.hardLimitMs - base.trafficMs + trafficS * 1000 }),
    ...(clients === undefined ? {} : { clients: Math.trunc(clients) }),
  };
}

/** The AMQP mode: orders through RabbitMQ, events out through the outbox. */
export interface AmqpPlan {
  variant: 'short' | 'long';
  processes: number;
  orders: number;
  trafficMs: number;
  kills: number;
  brokerRestarts: number;
  books: number;
  drainMs: number;
  hardLimitMs: number;
}

export function makeAmqpPlan(short: boolean): AmqpPlan {
  return {
    variant: short ? 'short' : 'long',
    processes: 2,
    orders: Number(process.env.TORTURE_AMQP_ORDERS ?? (short ? 400 : 4000)),
    trafficMs: Number(process.env.TORTURE_TRAFFIC_S ?? (short ? 30 : 300)) * 1000,
    kills: short ? 3 : 12,
    brokerRestarts: 1,
    books: 12,
    drainMs: short ? 60_000 : 120_000,
    hardLimitMs: short ? 200_000 : 1_200_000,
  };
}

/** The failover mode: HTTP and AMQP load while the PostgreSQL primary, then its successor's Patroni, then a RabbitMQ node are killed. */
export interface FailoverPlan {
  variant: 'short' | 'long';
  trafficMs: number;
  /** Rounds of the three kills, spread over the traffic. */
  rounds: number;
  httpProcesses: number;
  amqpProcesses: number;
  clients: number;
  books: number;
  orders: number;
  drainMs: number;
  hardLimitMs: number;
  standbyLagMs: number;
}

export function makeFailoverPlan(short: boolean, standbyLagMs = 0): FailoverPlan {
  if (!Number.isSafeInteger(standbyLagMs) || standbyLagMs < 0 || standbyLagMs > 30_000) {
    throw new Error(`--lag must be a number of milliseconds from 0 to 30000, got ${standbyLagMs}`);
  }
  const trafficS = envNumber('TORTURE_TRAFFIC_S');
  const base: Omit<FailoverPlan, 'standbyLagMs'> = short
    ? {
        variant: 'short',
        trafficMs: 110_000,
        rounds: 1,
        httpProcesses: 2,
        amqpProcesses: 2,
        clients: 10,
        books: 10,
        orders: 500,
        drainMs: 60_000,
        hardLimitMs: 420_000,
      }
    : {
        variant: 'long',
        trafficMs: 330_000,
        rounds: 2,
        httpProcesses: 2,
        amqpProcesses: 2,
        clients: 16,
        books: 12,
        orders: 2500,
        drainMs: 90_000,
        hardLimitMs: 900_000,
      };
  const sized =
    trafficS === undefined
      ? base
      : { ...base, trafficMs: trafficS * 1000, hardLimitMs: base.hardLimitMs - base.trafficMs + trafficS * 1000 };
  return { ...sized, standbyLagMs };
}
