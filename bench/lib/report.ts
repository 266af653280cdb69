/** The results record (bench/results/<date>.json) and the table it puts in bench/README.md. */
import { median } from './stats.js';

export interface RunSummary {
  messagesPerSec: number;
  p50Ms: number;
  p99Ms: number;
  answered: number;
  [detail: string]: unknown;
}

export interface CellRecord {
  scenario: string;
  /** hand-rolled, powertools: the peers (bench/peers/); pgbench-seed: the hand-rolled peer's transaction in pgbench. */
  target: 'service' | 'pgbench' | 'ceiling' | 'hand-rolled' | 'powertools' | 'pgbench-seed';
  concurrency: number;
  variant?: string;
  /** Median over the runs: messages (or pgbench transactions) per second. */
  messagesPerSec: number;
  p50Ms: number;
  p99Ms: number;
  errors: number;
  peakRssMb: number | null;
  /** Median CPU ms per message: the server process, PostgreSQL (throwaway cluster only), the load generator (and the Powertools peer's Redis). */
  cpuMsPerMessage: { server: number; postgres: number | null; loadGenerator: number; redis?: number } | null;
  /** Median commands per transaction, from the service's own metrics (the service's HTTP cells only). */
  messagesPerTransaction?: number;
  ok: boolean;
  runs: RunSummary[];
}

export interface GrowthRecord {
  concurrency: number;
  rows: number;
  insertSeconds: number;
  empty: CellRecord;
  full: CellRecord;
  throughputRatio: number;
  prune: {
    method: string;
    expiredRows: number;
    pruned: number | null;
    seconds: number | null;
    overlappedWholeCell: boolean;
    error: string | null;
    during: CellRecord;
    p99Ratio: number;
  };
}

/** A peer cell's exactly-once check in the peers' database. */
export interface PeerCheck {
  /** How much sum(reserved) moved during the cell. */
  reservedDelta: number;
  /** 201 answers (each reserves 1). */
  created: number;
  /** Requests sent but cut off unanswered when the cell ended (the peer may have processed them). */
  cutOff: number;
  ok: boolean;
}

/** Scenario 1 at far more connections than the service serves at once (target 7). */
export interface OverloadRecord {
  /** The build it measured, in before/after mode. */
  variant?: string;
  connections: number;
  seconds: number;
  openFileLimits: { runner: number | null; service: number | null };
  /** Why the cell did not run (the open-file limit is too low), if it did not. */
  skipped?: string;
  statuses?: Record<string, number>;
  created?: number;
  /** 503 /problems/overloaded answers with Retry-After. */
  shed?: number;
  errors?: number;
  transportErrors?: number;
  timeouts?: number;
  createdPerSec?: number;
  p50Ms?: number;
  /** Of all answers. */
  p99Ms?: number;
  p99CreatedMs?: number;
  /** The same two without each connection's first answer (its time includes opening the connection). */
  p99SteadyMs?: number;
  p99CreatedSteadyMs?: number;
  /** Inbox rows found for messages answered 503 overloaded (must be 0). */
  shedRecorded?: number;
  ok: boolean;
}

export type AmqpTarget = 'service' | 'hand-rolled';

/** One drain of the AMQP cell: N messages queued first, then the consumer started. */
export interface AmqpRun {
  messages: number;
  /** min(received_at) to max(completed_at) of the batch in the consumer's own inbox. */
  windowSeconds: number;
  /** messages ÷ windowSeconds. */
  messagesPerSec: number;
  /** From the consumer process's spawn to the last completion (start-up included). */
  fromSpawnSeconds: number;
  /** Messages per claiming transaction: inbox rows over distinct received_at. */
  meanBatch: number;
  /** CPU ms per message of the consumer's node process and of PostgreSQL, over cpuWindow. */
  cpuMsPerMessage: { server: number; postgres: number | null };
  cpuWindow: string;
  peakRssMb: number | null;
  /** The service's outbox after the drain: what the relay had left when the last command completed. */
  outbox?: {
    events: number;
    published: number;
    pendingAtLastCompletion: number;
    /** Last published_at − last completed_at; null when the relay did not catch up within its bound. */
    relayLagMs: number | null;
    caughtUp: boolean;
    /** Events in the bench's queue bound to the events exchange. */
    onExchange: number;
  };
  /** Exactly-once figures checked after the drain. */
  check: Record<string, number>;
  /** The hand-rolled peer's own counts (printed on exit). */
  peer?: Record<string, number | null>;
  ok: boolean;
  error?: string;
}

export interface AmqpRecord {
  messages: number;
  prefetch: number;
  repeat: number;
  vhost: { name: string; createdWith: string };
  /** What the PostgreSQL CPU figure counts. */
  postgresCpu: string;
  service: AmqpRun[];
  handRolled: AmqpRun[];
  /** Median service msgs/s ÷ median hand-rolled msgs/s. */
  ratio: number;
  ok: boolean;
}

export interface RunRecord {
  date: string;
  finished: string;
  command: string;
  machine: Record<string, string | number>;
  settings: Record<string, unknown>;
  cells: CellRecord[];
  invariants: { ok: boolean; detail: Record<string, number> };
  growth?: GrowthRecord;
  pgliteRssMb: number | null;
  /** VmRSS after start-up and seeding, before any load. */
  idleRssMb?: { service: number | null; pglite: number | null; peers?: Record<string, number | null> };
  overload?: OverloadRecord;
  amqp?: AmqpRecord;
  failed: boolean;
}

const START = '<!-- bench:results:start -->';
const END = '<!-- bench:results:end -->';

const LABELS: Record<string, string> = {
  unique: '(1) unique',
  duplicates: '(2) duplicates',
  hot: '(3) hot book',
  mixed: '(4) 70/30 mixed',
  pglite: '(5) unique, PGlite',
};

const f0 = (n: number | undefined) => (n === undefined || !Number.isFinite(n) ? '–' : n.toFixed(0));
const f1 = (n: number | undefined) => (n === undefined || !Number.isFinite(n) ? '–' : n.toFixed(1));
const f2 = (n: number | undefined) => (n === undefined || !Number.isFinite(n) ? '–' : n.toFixed(2));
const ratio = (a: number | undefined, b: number | undefined) =>
  a === undefined || b === undefined || !Number.isFinite(a) || !Number.isFinite(b) || b === 0 ? '–' : `${(a / b).toFixed(2)}×`;

export interface TargetCheck {
  target: string;
  figure: string;
  met: boolean | null;
}

/**
 * Today's figures for the targets that compare with them: the run in results/2026-11-30.json
 * (`npm run bench -- --repeat 3 --duration 5`, before the peers were added).
 */
export const TODAY = {
  uniqueC1: { messagesPerSec: 681, p50Ms: 1.31, p99Ms: 2.5 },
  pgliteUniqueC32: { messagesPerSec: 720 },
} as const;

/**
 * Target 7's bound on the p99 of commands taken on at 1,000 connections (201s, each connection's first
 * answer left out: it includes the TCP connect, delayed when 1,000 arrive at once): 4× target 3's.
 */
export const OVERLOAD_P99_BOUND_MS = 100;

/**
 * Overload goodput: at 1,000 connections the service commits at least this share of what it commits
 * at 64 (unique, same run), and answers the commands it takes on with a p99 within the bound below
 * (each connection's first answer included).
 */
export const OVERLOAD_GOODPUT_RATIO = 0.7;
export const OVERLOAD_GOODPUT_P99_MS = 1000;

/** Each target against this run's figures (null: not measured in this run). */
export function checkTargets(record: RunRecord): TargetCheck[] {
  const cell = (scenario: string, target: CellRecord['target'], c: number) =>
    record.cells.find((x) => x.scenario === scenario && x.target === target && x.concurrency === c);
  const checks: TargetCheck[] = [];
  const add = (target: string, a: number | undefined | null, figure: string, pass: (v: number) => boolean) =>
    checks.push({
      target,
      figure: a === undefined || a === null || !Number.isFinite(a) ? 'not measured' : figure,
      met: a === undefined || a === null || !Number.isFinite(a) ? null : pass(a),
    });
  const versus = (service: CellRecord | undefined, other: CellRecord | undefined) =>
    service && other ? service.messagesPerSec / other.messagesPerSec : undefined;
  const versusFigure = (service: CellRecord | undefined, other: CellRecord | undefined, unit = 'msgs/s') =>
    `${f0(service?.messagesPerSec)} vs ${f0(other?.messagesPerSec)} ${unit} = ${f2(versus(service, other))}×`;

  const s1 = cell('unique', 'service', 32);
  const h1 = cell('unique', 'hand-rolled', 32);
  const t1 = cell('unique', 'powertools', 32);
  const b1 = cell('unique', 'pgbench-seed', 32);
  add('(1) unique at 32: ≥ 1.2× the hand-rolled transaction', versus(s1, h1), versusFigure(s1, h1), (v) => v >= 1.2);
  add('(1) unique at 32: ≥ 1.0× Powertools + Redis', versus(s1, t1), versusFigure(s1, t1), (v) => v >= 1.0);
  add(
    '(1) aim: unique at 32 ≥ 1.0× pgbench of the seed transaction',
    versus(s1, b1),
    versusFigure(s1, b1, 'msgs/s (tps)'),
    (v) => v >= 1.0,
  );

  const s2 = cell('duplicates', 'service', 32);
  const t2 = cell('duplicates', 'powertools', 32);
  add('(2) duplicates at 32: ≥ 1.5× Powertools + Redis', versus(s2, t2), versusFigure(s2, t2), (v) => v >= 1.5);

  add('(3) unique at 32: p99 ≤ 25 ms', s1?.p99Ms, `${f1(s1?.p99Ms)} ms`, (v) => v <= 25);
  const s1c1 = cell('unique', 'service', 1);
  add(
    `(3) unique at 1: no slower than today (p99 ≤ ${TODAY.uniqueC1.p99Ms} ms)`,
    s1c1?.p99Ms,
    `p99 ${f2(s1c1?.p99Ms)} ms, p50 ${f2(s1c1?.p50Ms)} ms, ${f0(s1c1?.messagesPerSec)} msgs/s (today: p99 ${TODAY.uniqueC1.p99Ms} ms, p50 ${TODAY.uniqueC1.p50Ms} ms, ${TODAY.uniqueC1.messagesPerSec} msgs/s)`,
    (v) => v <= TODAY.uniqueC1.p99Ms,
  );

  const s3 = cell('hot', 'service', 32);
  const b3 = cell('hot', 'pgbench-seed', 32);
  const p3 = cell('hot', 'pgbench', 32);
  add(
    "(4) hot book at 32: ≥ 1.0× pgbench's hot row (seed transaction, one book)",
    versus(s3, b3),
    `${versusFigure(s3, b3, 'msgs/s (tps)')}${p3 ? `; against pgbench of the service's own statements: ${f0(p3.messagesPerSec)} tps = ${f2(versus(s3, p3))}×` : ''}`,
    (v) => v >= 1.0,
  );

  // CPU per new message as it does not move with the machine: the process, PostgreSQL and (Powertools) Redis.
  const cpuTotal = (x: CellRecord | undefined) => {
    const cpu = x?.cpuMsPerMessage;
    if (cpu === null || cpu === undefined || cpu.postgres === null) return undefined;
    return cpu.server + cpu.postgres + (cpu.redis ?? 0);
  };
  for (const [peer, label, bound] of [
    [h1, 'the hand-rolled transaction', 0.8],
    [t1, 'Powertools + Redis', 1.0],
  ] as const) {
    const [mine, theirs] = [cpuTotal(s1), cpuTotal(peer)];
    add(
      `(1) CPU per new message (process + PostgreSQL, + Redis), unique at 32: ≤ ${bound}× ${label}`,
      mine !== undefined && theirs !== undefined ? mine / theirs : undefined,
      `${f2(mine)} vs ${f2(theirs)} ms = ${mine !== undefined && theirs !== undefined ? f2(mine / theirs) : '–'}×`,
      (v) => v <= bound,
    );
  }
  const h1c1 = cell('unique', 'hand-rolled', 1);
  add(
    "(3) unique at 1: p99 no higher than the hand-rolled transaction's",
    s1c1 !== undefined && h1c1 !== undefined ? s1c1.p99Ms / h1c1.p99Ms : undefined,
    `p99 ${f2(s1c1?.p99Ms)} vs ${f2(h1c1?.p99Ms)} ms; ${f0(s1c1?.messagesPerSec)} vs ${f0(h1c1?.messagesPerSec)} msgs/s`,
    (v) => v <= 1,
  );

  const cpuService = s1?.cpuMsPerMessage?.server;
  const cpuPeer = h1?.cpuMsPerMessage?.server;
  add(
    "(5) node CPU per new message (unique at 32) ≤ the hand-rolled peer's",
    cpuService !== undefined && cpuPeer !== undefined ? cpuService / cpuPeer : undefined,
    `${f2(cpuService)} vs ${f2(cpuPeer)} ms = ${cpuService !== undefined && cpuPeer !== undefined ? f2(cpuService / cpuPeer) : '–'}×`,
    (v) => v <= 1,
  );

  const idle = record.idleRssMb;
  add('(6) idle RSS on PostgreSQL ≤ 80 MB', idle?.service, `${f0(idle?.service ?? undefined)} MB`, (v) => v <= 80);
  add('(6) idle RSS on PGlite (embedded default) ≤ 300 MB', idle?.pglite, `${f0(idle?.pglite ?? undefined)} MB`, (v) => v <= 300);
  const s5 = cell('pglite', 'service', 32);
  add(
    `(6) PGlite unique at 32: ≥ 3× today's ${TODAY.pgliteUniqueC32.messagesPerSec} msgs/s`,
    s5?.ok ? s5.messagesPerSec / TODAY.pgliteUniqueC32.messagesPerSec : undefined,
    `${f0(s5?.messagesPerSec)} msgs/s = ${s5 ? f2(s5.messagesPerSec / TODAY.pgliteUniqueC32.messagesPerSec) : '–'}×`,
    (v) => v >= 3,
  );

  const o = record.overload;
  const ran = o !== undefined && o.skipped === undefined;
  add(
    `(7) overload, ${o?.connections ?? 1000} connections: sheds with 503 overloaded + Retry-After, nothing recorded, p99 of 201s ≤ ${OVERLOAD_P99_BOUND_MS} ms`,
    ran ? 1 : undefined,
    ran
      ? `${o.created} × 201, ${o.shed} × 503 overloaded (${o.shedRecorded} recorded), ${o.errors} errors; p99 of 201s ${f1(o.p99CreatedSteadyMs)} ms ` +
          `(all answers ${f1(o.p99SteadyMs)} ms; with each connection's first answer: ${f1(o.p99CreatedMs)} / ${f1(o.p99Ms)} ms)`
      : '',
    () => ran && o.ok && (o.shed ?? 0) > 0 && (o.p99CreatedSteadyMs ?? Infinity) <= OVERLOAD_P99_BOUND_MS,
  );

  const u64 = cell('unique', 'service', 64);
  const goodput = ran && o.ok && u64?.ok && u64.messagesPerSec > 0 ? (o.createdPerSec ?? 0) / u64.messagesPerSec : undefined;
  add(
    `(7) overload goodput: 201s/s at ${o?.connections ?? 1000} connections ≥ ${OVERLOAD_GOODPUT_RATIO}× unique at 64, p99 of the 201s ≤ ${OVERLOAD_GOODPUT_P99_MS} ms`,
    goodput,
    ran && u64 !== undefined
      ? `${f0(o.createdPerSec)} vs ${f0(u64.messagesPerSec)} msgs/s = ${f2(goodput)}×; p99 of 201s ${f1(o.p99CreatedMs)} ms ` +
          `(without each connection's first answer ${f1(o.p99CreatedSteadyMs)} ms)`
      : '',
    (v) => v >= OVERLOAD_GOODPUT_RATIO && (o?.p99CreatedMs ?? Infinity) <= OVERLOAD_GOODPUT_P99_MS,
  );

  const a = record.amqp;
  const lag = a?.service.map((r) => r.outbox?.relayLagMs ?? null);
  add(
    `AMQP: queued-then-drained throughput ≥ 2× the hand-rolled amqplib consumer, the relay publishing every event within ${RELAY_LAG_BOUND_MS} ms of the last completion`,
    a?.ok ? a.ratio : undefined,
    a
      ? `${f0(median(a.service.map((r) => r.messagesPerSec)))} vs ${f0(median(a.handRolled.map((r) => r.messagesPerSec)))} msgs/s = ${f2(a.ratio)}×; ` +
          `outbox lag ${a.service.map((r) => `${r.outbox?.pendingAtLastCompletion ?? '–'} pending, ${r.outbox?.relayLagMs ?? '–'} ms`).join('; ')}`
      : '',
    (v) => v >= 2 && lag !== undefined && lag.every((l) => l !== null && l <= RELAY_LAG_BOUND_MS),
  );
  return checks;
}

/** "The relay keeps up": every event published within this long after the last command completed. */
export const RELAY_LAG_BOUND_MS = 1000;

/** The AMQP cell's table: each drain of the service and of the hand-rolled amqplib consumer. */
function renderAmqp(a: AmqpRecord): string[] {
  const lines = [
    `AMQP (${a.messages.toLocaleString('en')} order-placed messages queued first on vhost \`${a.vhost.name}\`, then the consumer started; prefetch ${a.prefetch}; ` +
      `msgs/s = messages ÷ (last completed_at − first received_at) in the consumer's own inbox; PostgreSQL CPU: ${a.postgresCpu}):`,
    '',
    '| consumer | run | msgs/s | drain s | from start s | node CPU ms/msg | PG CPU ms/msg | outbox pending at last completion | relay done after | on the exchange | exactly once |',
    '|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|---|',
  ];
  const rows = (label: string, runs: AmqpRun[]) =>
    runs.forEach((r, i) => {
      const o = r.outbox;
      lines.push(
        `| ${label} | ${i + 1} | ${f0(r.messagesPerSec)}${r.ok ? '' : ' ✗'} | ${f2(r.windowSeconds)} | ${f2(r.fromSpawnSeconds)} | ${f2(r.cpuMsPerMessage.server)} | ` +
          `${f2(r.cpuMsPerMessage.postgres ?? undefined)} | ${o ? o.pendingAtLastCompletion : '–'} | ${o ? (o.caughtUp ? `${o.relayLagMs} ms` : '**not within the bound**') : '–'} | ` +
          `${o ? o.onExchange : '–'} | ${r.error ? `**failed**: ${r.error.slice(0, 120)}` : r.ok ? 'holds' : `**BROKEN** ${JSON.stringify(r.check)}`} |`,
      );
    });
  rows('this service (compiled, outbox relay on)', a.service);
  rows('hand-rolled amqplib + pg', a.handRolled);
  lines.push('', `Service ÷ hand-rolled (medians): ${f2(a.ratio)}×.`);
  return lines;
}

/** The targets of the earlier round, still computed from the same run. */
export function checkEarlierTargets(record: RunRecord): TargetCheck[] {
  const cell = (scenario: string, target: CellRecord['target'], c: number) =>
    record.cells.find((x) => x.scenario === scenario && x.target === target && x.concurrency === c);
  const s1 = cell('unique', 'service', 32);
  const p1 = cell('unique', 'pgbench', 32);
  const s2 = cell('duplicates', 'service', 32);
  const rssCells = record.cells.filter(
    (x) => x.target === 'service' && x.peakRssMb !== null && x.scenario !== 'pglite' && x.scenario !== 'amqp',
  );
  const rss = rssCells.length > 0 ? Math.max(...rssCells.map((x) => x.peakRssMb!)) : undefined;
  const checks: TargetCheck[] = [];
  const add = (target: string, a: number | undefined, figure: string, pass: (v: number) => boolean) =>
    checks.push({
      target,
      figure: a === undefined || !Number.isFinite(a) ? 'not measured' : figure,
      met: a === undefined || !Number.isFinite(a) ? null : pass(a),
    });

  const r1 = s1 && p1 ? s1.messagesPerSec / p1.messagesPerSec : undefined;
  add(
    "unique at 32: ≥ 0.8× pgbench of the service's statements",
    r1,
    `${f0(s1?.messagesPerSec)} / ${f0(p1?.messagesPerSec)} = ${f2(r1)}×`,
    (v) => v >= 0.8,
  );
  const r2 = s2 && s1 ? s2.messagesPerSec / s1.messagesPerSec : undefined;
  add('duplicates at 32: ≥ 2× unique', r2, `${f0(s2?.messagesPerSec)} / ${f0(s1?.messagesPerSec)} = ${f2(r2)}×`, (v) => v >= 2);
  add('peak RSS < 200 MB (PostgreSQL service)', rss, `${f0(rss)} MB`, (v) => v < 200);
  const g = record.growth;
  add(
    `growth: ${g ? (g.rows / 1e6).toFixed(1) : '5'} M inbox rows cost < 10% throughput`,
    g?.throughputRatio,
    g ? `${f0(g.full.messagesPerSec)} vs ${f0(g.empty.messagesPerSec)} msgs/s = ${f2(g.throughputRatio)}×` : '',
    (v) => v >= 0.9,
  );
  add(
    'growth: pruning raises p99 < 2×',
    g?.prune.p99Ratio,
    g ? `${f1(g.prune.during.p99Ms)} vs ${f1(g.full.p99Ms)} ms = ${f2(g.prune.p99Ratio)}×` : '',
    (v) => v < 2,
  );
  return checks;
}

/** The generated part of bench/README.md: run description, the table, growth and the targets. */
export function renderResults(record: RunRecord, resultsPath: string): string {
  const lines: string[] = [];
  const m = record.machine;
  lines.push(
    `Latest run: **${record.date.slice(0, 16).replace('T', ' ')} UTC**, \`${record.command}\` → [${resultsPath}](${resultsPath})${record.failed ? ' — **FAILED** (unexpected statuses, errors or broken invariants: these figures do not count)' : ''}.`,
  );
  lines.push('');
  lines.push(
    `Machine: ${m.cpus} × ${m.cpuModel}, ${m.memoryGb} GB, ${m.kernel}; PostgreSQL ${m.postgres}; Node ${m.node}; ${m.loadGenerator}. ` +
      `Service: ${String(record.settings.service)}. PostgreSQL: ${String(record.settings.postgres)}. ` +
      `${String(record.settings.secondsPerCell)} s per cell, median of ${String(record.settings.repeat)} run(s).` +
      (typeof record.settings.peers === 'string' ? ` Peers: ${record.settings.peers}.` : ''),
  );
  const withPeers = record.cells.some((x) => x.scenario !== 'amqp' && (x.target === 'hand-rolled' || x.target === 'powertools'));
  const scenarios = [...new Set(record.cells.filter((x) => x.target === 'service' && x.scenario !== 'amqp').map((x) => x.scenario))];
  // A run of the AMQP cell alone has no HTTP table.
  if (scenarios.length > 0)
    lines.push(
      '',
      '| scenario | c | msgs/s | p50 ms | p99 ms | errors | peak RSS MB | pgbench tps | ÷ pgbench | ceiling req/s | ÷ ceiling | CPU ms/msg service + PG (pgbench: PG) |' +
        (withPeers ? ' hand-rolled msgs/s | ÷ hand-rolled | Powertools + Redis msgs/s | ÷ Powertools |' : ''),
      '|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|' + (withPeers ? '--:|--:|--:|--:|' : ''),
    );
  const peerColumns = (s: CellRecord) => {
    if (!withPeers) return '';
    const h = find(s.scenario, 'hand-rolled', s.concurrency);
    const t = find(s.scenario, 'powertools', s.concurrency);
    const figure = (x: CellRecord | undefined) => (x ? `${f0(x.messagesPerSec)}${x.ok ? '' : ' ✗'} (p99 ${f1(x.p99Ms)})` : '–');
    return ` ${figure(h)} | ${ratio(s.messagesPerSec, h?.messagesPerSec)} | ${figure(t)} | ${ratio(s.messagesPerSec, t?.messagesPerSec)} |`;
  };
  const cpu = (x: CellRecord | undefined) =>
    x?.cpuMsPerMessage
      ? `${x.target === 'pgbench' ? '' : `${f2(x.cpuMsPerMessage.server)} + `}${f2(x.cpuMsPerMessage.postgres ?? undefined)}`
      : '–';
  const find = (scenario: string, target: CellRecord['target'], c: number) =>
    record.cells.find((x) => x.scenario === scenario && x.target === target && x.concurrency === c);
  for (const scenario of scenarios) {
    for (const s of record.cells.filter((x) => x.scenario === scenario && x.target === 'service')) {
      const p = find(scenario, 'pgbench', s.concurrency);
      const ceil = find('any', 'ceiling', s.concurrency);
      lines.push(
        `| ${LABELS[scenario] ?? scenario} | ${s.concurrency} | ${f0(s.messagesPerSec)}${s.ok ? '' : ' ✗'} | ${f2(s.p50Ms)} | ${f2(s.p99Ms)} | ${s.errors} | ${f0(s.peakRssMb ?? undefined)} | ` +
          `${p ? `${f0(p.messagesPerSec)}${p.ok ? '' : ' ✗'} (p99 ${f1(p.p99Ms)})` : '–'} | ${ratio(s.messagesPerSec, p?.messagesPerSec)} | ` +
          `${ceil ? f0(ceil.messagesPerSec) : '–'} | ${ratio(s.messagesPerSec, ceil?.messagesPerSec)} | ${cpu(s)}${p ? ` (${cpu(p)})` : ''} |` +
          peerColumns(s),
      );
    }
  }
  if (withPeers) lines.push('', ...renderPeers(record));
  if (record.amqp !== undefined) lines.push('', ...renderAmqp(record.amqp));
  const ceilings = record.cells.filter((x) => x.target === 'ceiling');
  if (ceilings.length > 0) {
    lines.push('');
    lines.push(
      `HTTP ceiling (bench/ceiling.ts): ${ceilings.map((x) => `c=${x.concurrency}: ${f0(x.messagesPerSec)} req/s, p99 ${f2(x.p99Ms)} ms`).join('; ')}.`,
    );
  }
  // A run of the AMQP cell alone checks exactly-once in its own table, not here.
  if (Object.keys(record.invariants.detail).length > 0)
    lines.push(
      '',
      `Exactly once, checked in the database after the load: ${record.invariants.ok ? 'holds' : '**BROKEN**'} ` +
        `(${Object.entries(record.invariants.detail)
          .map(([k, v]) => `${k} ${v}`)
          .join(', ')}).`,
    );
  const g = record.growth;
  if (g) {
    lines.push('');
    lines.push(
      `Growth (scenario 1 at c=${g.concurrency}; medians of ${g.empty.runs.length} runs, the pruning cell once, as pruning empties what it measures):`,
    );
    lines.push('');
    lines.push('| inbox | msgs/s | p50 ms | p99 ms | errors |');
    lines.push('|---|--:|--:|--:|--:|');
    lines.push(`| empty | ${f0(g.empty.messagesPerSec)} | ${f2(g.empty.p50Ms)} | ${f2(g.empty.p99Ms)} | ${g.empty.errors} |`);
    lines.push(
      `| ${(g.rows / 1e6).toFixed(1)} M rows (inserted in ${f0(g.insertSeconds)} s) | ${f0(g.full.messagesPerSec)} | ${f2(g.full.p50Ms)} | ${f2(g.full.p99Ms)} | ${g.full.errors} |`,
    );
    lines.push(
      `| same, pruning ${(g.prune.expiredRows / 1e6).toFixed(1)} M expired rows alongside | ${f0(g.prune.during.messagesPerSec)} | ${f2(g.prune.during.p50Ms)} | ${f2(g.prune.during.p99Ms)} | ${g.prune.during.errors} |`,
    );
    lines.push('');
    lines.push(
      `Pruning: ${g.prune.method}; took ${f1(g.prune.seconds ?? undefined)} s${g.prune.overlappedWholeCell ? ' (longer than the cell: it overlapped all of it)' : ' (shorter than the cell: part of the cell ran without it)'}` +
        `${g.prune.error ? `; failed: ${g.prune.error}` : ''}.`,
    );
  }
  if (record.pgliteRssMb !== null) {
    lines.push('');
    lines.push(`The embedded (PGlite) service's peak RSS: ${f0(record.pgliteRssMb)} MB (PostgreSQL runs inside the process).`);
  }
  const idle = record.idleRssMb;
  if (idle && (idle.service !== null || idle.pglite !== null)) {
    const peers = Object.entries(idle.peers ?? {}).map(([k, v]) => `${k} ${f0(v ?? undefined)} MB`);
    lines.push('');
    lines.push(
      `Idle RSS (VmRSS after start-up and seeding, before any load): the service on PostgreSQL ${f0(idle.service ?? undefined)} MB` +
        `${idle.pglite === null ? '' : `, on PGlite ${f0(idle.pglite)} MB`}${peers.length > 0 ? `; the peers: ${peers.join(', ')}` : ''}.`,
    );
  }
  const o = record.overload;
  if (o) {
    lines.push('');
    lines.push(
      o.skipped !== undefined
        ? `Overload (scenario 1 at ${o.connections} connections): skipped, ${o.skipped}.`
        : `Overload (scenario 1 at ${o.connections} connections for ${o.seconds} s, open-file limits runner ${o.openFileLimits.runner ?? '?'} / service ${o.openFileLimits.service ?? '?'}): ` +
            `${
              Object.entries(o.statuses ?? {})
                .map(([k, v]) => `${v} × ${k}`)
                .join(', ') || 'no answers'
            }; ` +
            `${o.shed} of them 503 \`/problems/overloaded\` with Retry-After (inbox rows for those: ${o.shedRecorded}); ` +
            `${o.errors} errors (${o.transportErrors} transport, ${o.timeouts} timeouts); ${f0(o.createdPerSec)} new msgs/s; ` +
            `p50 ${f2(o.p50Ms)} ms, p99 ${f2(o.p99Ms)} ms of all answers, p99 ${f2(o.p99CreatedMs)} ms of the 201s; ` +
            `without each connection's first answer (which includes opening it): p99 ${f2(o.p99SteadyMs)} ms of all, ${f2(o.p99CreatedSteadyMs)} ms of the 201s` +
            `${o.ok ? '' : ' — **FAILED**'}.`,
    );
  }
  lines.push('');
  lines.push('Targets (2 cores shared by PostgreSQL, the service, the peers and the load generator; ratios from this run):');
  lines.push('');
  lines.push('| target | this run | met |');
  lines.push('|---|---|---|');
  const met = (t: TargetCheck) => (t.met === null ? '–' : t.met ? 'met' : '**no**');
  for (const t of checkTargets(record)) lines.push(`| ${t.target} | ${t.figure} | ${met(t)} |`);
  lines.push('');
  lines.push('Earlier targets, same run:');
  lines.push('');
  lines.push('| target | this run | met |');
  lines.push('|---|---|---|');
  for (const t of checkEarlierTargets(record)) lines.push(`| ${t.target} | ${t.figure} | ${met(t)} |`);
  return lines.join('\n');
}

const PEER_TARGETS: [CellRecord['target'], string][] = [
  ['hand-rolled', 'hand-rolled transaction'],
  ['powertools', 'Powertools + Redis'],
  ['pgbench-seed', 'pgbench, seed transaction'],
];

/** Per cell, each peer beside the service: its figures, its CPU, the service's ratio to it, its exactly-once check. */
function renderPeers(record: RunRecord): string[] {
  const lines: string[] = [];
  lines.push(
    "Peers, same cells, same run (bench/peers/; pgbench of the seed transaction: bench/pgbench/seed-transaction.sql on the peers' tables):",
  );
  lines.push('');
  lines.push(
    '| scenario | c | peer | msgs/s | p50 ms | p99 ms | errors | node CPU ms/msg | PG CPU ms/msg | service ÷ peer | exactly once |',
  );
  lines.push('|---|--:|---|--:|--:|--:|--:|--:|--:|--:|---|');
  for (const s of record.cells.filter(
    (x) => x.target === 'service' && (x.scenario === 'unique' || x.scenario === 'duplicates' || x.scenario === 'hot'),
  )) {
    for (const [target, label] of PEER_TARGETS) {
      const p = record.cells.find((x) => x.scenario === s.scenario && x.target === target && x.concurrency === s.concurrency);
      if (!p) continue;
      const cpu = p.cpuMsPerMessage;
      const checks = p.runs.map((r) => r.exactlyOnce as PeerCheck | undefined).filter((x): x is PeerCheck => x !== undefined);
      const once =
        checks.length === 0
          ? '–'
          : checks.every((c) => c.ok)
            ? `holds (${checks.map((c) => `+${c.reservedDelta} reserved, ${c.created} × 201`).join('; ')})`
            : `**BROKEN** (${checks.map((c) => `+${c.reservedDelta} reserved, ${c.created} × 201, ${c.cutOff} cut off`).join('; ')})`;
      lines.push(
        `| ${LABELS[s.scenario] ?? s.scenario} | ${s.concurrency} | ${label} | ${f0(p.messagesPerSec)}${p.ok ? '' : ' ✗'} | ${f2(p.p50Ms)} | ${f2(p.p99Ms)} | ${p.errors} | ` +
          `${target === 'pgbench-seed' ? '–' : f2(cpu?.server)}${cpu?.redis === undefined ? '' : ` (+ Redis ${f2(cpu.redis)})`} | ${f2(cpu?.postgres ?? undefined)} | ` +
          `${ratio(s.messagesPerSec, p.messagesPerSec)} | ${once} |`,
      );
    }
  }
  return lines;
}

/** Replaces the generated block of the README (between the markers), or appends one. */
export function renderReadme(existing: string, record: RunRecord, resultsPath: string): string {
  const block = `${START}\n${renderResults(record, resultsPath)}\n${END}`;
  const start = existing.indexOf(START);
  const end = existing.indexOf(END);
  if (start >= 0 && end > start) return existing.slice(0, start) + block + existing.slice(end + END.length);
  return `${existing.trimEnd()}\n\n## Latest results\n\n${block}\n`;
}
