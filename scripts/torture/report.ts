/** The counters a run keeps, and the summary and TORTURE_RESULT line printed at its end. */
import { elapsedMs, violations } from './log.js';
import type { AmqpPlan, Plan } from './plan.js';
import type { Service } from './services.js';

/** HTTP mode counters. */
export const stats = {
  messages: 0,
  producerDuplicates: 0,
  racingDuplicates: 0,
  deliveries: 0,
  /** Copies sent on purpose: the second of a simultaneous pair and re-deliveries after an acknowledgement. */
  duplicates: 0,
  simultaneousPairs: 0,
  retries: 0,
  acknowledgements: 0,
  processed201: 0,
  replayed200: 0,
  inFlight409: 0,
  status5xx: 0,
  status5xxDuringFaults: 0,
  status5xxByCode: new Map<number, number>(),
  networkErrors: 0,
  timeouts: 0,
  refused: 0,
  restocks: 0,
  restocksRefused: 0,
  crashes: 0,
  connectionKillEvents: 0,
  backendsKilled: 0,
  pgRestarts: 0,
  startupFailures: 0,
  unexpectedExits: 0,
  unacknowledged: 0,
};

/** AMQP mode counters. */
export const amqpStats = {
  orders: 0,
  publishes: 0,
  duplicatePublishes: 0,
  producerDuplicates: 0,
  publishRetries: 0,
  failedConnects: 0,
  crashes: 0,
  brokerRestarts: 0,
  eventsReceived: 0,
  eventRedeliveries: 0,
  unexpectedExits: 0,
};

/** The first `max` violations, each detail cut to `width` characters. */
function listViolations(max: number, width: number): string[] {
  return violations.all.slice(0, max).map((v) => `  ${v.kind}: ${v.detail.slice(0, width)}`);
}

/** The machine-readable last line, which the torture tests parse. */
function resultLine(record: Record<string, unknown>): string {
  return `TORTURE_RESULT ${JSON.stringify({ ...record, violations: violations.count })}\n`;
}

export function httpSummary(plan: Plan, seed: number, services: readonly Service[], fuzzPassed: boolean | undefined): string {
  const byCode = [...stats.status5xxByCode.entries()].map(([c, n]) => `${c}: ${n}`).join(', ') || 'none';
  const errorLogs = new Map<string, number>();
  for (const s of services) for (const [k, n] of s.errorLogs) errorLogs.set(k, (errorLogs.get(k) ?? 0) + n);
  const lines = [
    `== torture summary (${plan.variant} variant, seed ${seed})`,
    `duration:                ${(elapsedMs() / 1000).toFixed(0)} s (traffic ${plan.trafficMs / 1000} s)`,
    `service processes:       ${plan.processes}, clients: ${plan.clients}, books: ${plan.books}`,
    `messages:                ${stats.messages} (producer duplicates ${stats.producerDuplicates}, racing pairs ${stats.racingDuplicates})`,
    `deliveries:              ${stats.deliveries} (retries ${stats.retries})`,
    `duplicates:              ${stats.duplicates} (simultaneous pairs to two processes ${stats.simultaneousPairs})`,
    `acknowledgements:        ${stats.acknowledgements} (201 processed ${stats.processed201}, 200 replayed ${stats.replayed200})`,
    `409 in flight:           ${stats.inFlight409}`,
    `5xx answers:             ${stats.status5xx} (during injected faults ${stats.status5xxDuringFaults}; ${byCode})`,
    `network errors:          ${stats.networkErrors} (refused ${stats.refused}, timeouts ${stats.timeouts})`,
    `restocks:                ${stats.restocks} (refused below reserved ${stats.restocksRefused})`,
    `crashes survived:        ${stats.crashes} (kill -9; startup retries ${stats.startupFailures}, ` +
      `unexpected exits ${stats.unexpectedExits})`,
    `connections killed:      ${stats.connectionKillEvents} (events; ${stats.backendsKilled} connections ended)`,
    `restarts:                ${stats.pgRestarts} (PostgreSQL fast restarts)`,
    ...(fuzzPassed === undefined ? [] : [`fuzz (${plan.fuzzRuns} cases):     ${fuzzPassed ? 'passed' : 'FAILED'}`]),
    `unacknowledged messages: ${stats.unacknowledged}`,
    `invariant violations:    ${violations.count}`,
  ];
  if (errorLogs.size > 0) {
    lines.push('service error logs (level >= error):');
    for (const [k, n] of [...errorLogs.entries()].sort((a, b) => b[1] - a[1]).slice(0, 12)) lines.push(`  ${n} x ${k}`);
  }
  if (violations.count > 0) {
    const kinds = new Map<string, number>();
    for (const v of violations.all) kinds.set(v.kind, (kinds.get(v.kind) ?? 0) + 1);
    lines.push(`violations by kind: ${[...kinds.entries()].map(([k, n]) => `${k} ${n}`).join(', ')}`);
    lines.push(...listViolations(20, 600));
  }
  return lines.join('\n');
}

/** The HTTP mode's summary and result line. */
export function printHttpReport(plan: Plan, seed: number, services: readonly Service[], fuzzPassed: boolean | undefined): void {
  process.stdout.write(`\n${httpSummary(plan, seed, services, fuzzPassed)}\n`);
  const counters = Object.fromEntries(Object.entries(stats).filter(([, v]) => typeof v === 'number'));
  process.stdout.write(resultLine({ variant: plan.variant, seed, ...counters }));
}

/** The AMQP mode's summary and result line. */
export function printAmqpReport(plan: AmqpPlan, seed: number): void {
  const s = amqpStats;
  const lines = [
    '== torture summary (AMQP)',
    `variant:                 ${plan.variant}`,
    `seed:                    ${seed}`,
    `orders:                  ${s.orders}`,
    `confirmed publishes:     ${s.publishes} (${s.duplicatePublishes} same-id copies, ${s.producerDuplicates} new-id duplicates, ` +
      `${s.publishRetries} retries)`,
    `kill -9:                 ${s.crashes}`,
    `RabbitMQ restarts:       ${s.brokerRestarts} (clients failed to connect ${s.failedConnects} times meanwhile)`,
    `events received:         ${s.eventsReceived} (${s.eventRedeliveries} repeats)`,
    `unexpected exits:        ${s.unexpectedExits}`,
    `invariant violations:    ${violations.count}`,
    ...listViolations(30, Number.POSITIVE_INFINITY),
  ];
  process.stdout.write(`\n${lines.join('\n')}\n`);
  process.stdout.write(resultLine({ mode: 'amqp', variant: plan.variant, seed, ...s }));
}
