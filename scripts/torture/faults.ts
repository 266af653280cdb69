/** Fault injection: kill -9 of a service, ending its database connections, PostgreSQL and RabbitMQ restarts. */
import { setTimeout as sleep } from 'node:timers/promises';
import { describeError, say, violation } from './log.js';
import type { DatabaseServer, RunDatabase } from './database.js';
import { isShuttingDown, type ThrowawayServer } from './processes.js';
import { between, pick, type Rng } from './random.js';
import { amqpStats, stats } from './report.js';
import type { Service } from './services.js';

/** When each fault was under way; a 5xx overlapping one of these is an expected consequence. */
const faultWindows: { kind: string; start: number; end: number }[] = [];
const FAULT_GRACE_MS = 3000;

/** Opens a fault window now; close() ends it. A 5xx overlapping a window (or its grace) is expected. */
export function openFault(kind: string): { close(): void } {
  const window = { kind, start: Date.now(), end: Number.POSITIVE_INFINITY };
  faultWindows.push(window);
  return {
    close() {
      window.end = Date.now();
    },
  };
}

/** Whether [from, to] overlaps a fault, or the few seconds after one. */
export function overlapsFault(from: number, to: number): boolean {
  return faultWindows.some((w) => from <= w.end + FAULT_GRACE_MS && to >= w.start);
}

/** Spreads `count` moments over [from, to): one in each equal slice, at a random point of it. */
export function schedule(rng: Rng, count: number, from: number, to: number): number[] {
  const slice = (to - from) / Math.max(count, 1);
  return Array.from({ length: count }, (_, i) => from + slice * (i + 0.1 + rng() * 0.8));
}

async function sleepUntil(at: number): Promise<void> {
  const wait = at - Date.now();
  if (wait > 0) await sleep(wait);
}

export interface KillOptions {
  /** The pause between the kill and the restart, drawn from [min, max] ms. */
  pauseMs: readonly [number, number];
  /** How long a restart may take, including its retries. */
  restartWithinMs: number;
  /** Counts and reports one kill, before the pause. */
  killed(victim: Service, pauseMs: number): void;
}

/** At each moment, kill -9 of a random live service process, which is started again after a pause. */
export async function killLoop(services: readonly Service[], times: readonly number[], rng: Rng, options: KillOptions): Promise<void> {
  for (const at of times) {
    await sleepUntil(at);
    if (isShuttingDown()) return;
    let victim: Service | undefined;
    for (let wait = 0; wait < 100 && victim === undefined; wait++) {
      const up = services.filter((s) => s.up && !s.expectingExit);
      if (up.length > 0) victim = pick(rng, up);
      else await sleep(100);
    }
    if (victim === undefined) {
      say('kill -9: no process up to kill');
      continue;
    }
    const fault = openFault('kill -9');
    await victim.kill9();
    const pause = between(rng, options.pauseMs[0], options.pauseMs[1]);
    options.killed(victim, pause);
    await sleep(pause);
    await victim.start(Date.now() + options.restartWithinMs);
    fault.close();
  }
}

/**
 * At each moment, all or some of the service's connections to the run's database are ended
 * (pg_terminate_backend on PostgreSQL, KILL CONNECTION on MariaDB/MySQL).
 */
export async function connectionKillLoop(server: DatabaseServer, database: RunDatabase, times: readonly number[], rng: Rng): Promise<void> {
  const name = server.connectionKillName;
  for (const at of times) {
    await sleepUntil(at);
    for (let attempt = 0; attempt < 30 && !isShuttingDown(); attempt++) {
      const fault = openFault(name);
      try {
        const everything = rng() < 0.5;
        const killed = await server.killServiceConnections(database, (ids) => {
          const chosen = everything ? ids : ids.filter(() => rng() < 0.5);
          if (chosen.length === 0 && ids.length > 0) chosen.push(pick(rng, ids));
          return chosen;
        });
        fault.close();
        if (killed > 0) {
          stats.connectionKillEvents++;
          stats.backendsKilled += killed;
          say(`${name}: ${killed} service connection(s) (#${stats.connectionKillEvents})`);
          break;
        }
      } catch (error) {
        fault.close();
        say(`${name} failed (${describeError(error)}); trying again`);
      }
      await sleep(300);
    }
  }
}

/** At each moment, a fast restart of the run's own PostgreSQL cluster. */
export async function pgRestartLoop(server: ThrowawayServer, times: readonly number[]): Promise<void> {
  for (const at of times) {
    await sleepUntil(at);
    if (isShuttingDown()) return;
    const fault = openFault('postgres restart');
    const t0 = Date.now();
    try {
      await server.restart();
      stats.pgRestarts++;
      say(`PostgreSQL fast restart #${stats.pgRestarts} took ${Date.now() - t0} ms`);
    } catch (error) {
      violation('harness', `PostgreSQL restart failed: ${describeError(error)}`);
    }
    fault.close();
  }
}

/** At `at`, a restart of the run's own RabbitMQ node; a failed restart fails the run. */
export async function brokerRestart(broker: ThrowawayServer, at: number): Promise<void> {
  await sleepUntil(at);
  const fault = openFault('rabbitmq restart');
  say('restarting RabbitMQ');
  await broker.restart();
  amqpStats.brokerRestarts++;
  say('RabbitMQ is back');
  fault.close();
}
