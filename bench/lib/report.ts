/** The results record (bench/results/<date>.json) and the table it puts in bench/README.md. */

export interface RunSummary {
  messagesPerSec: number;
  p50Ms: number;
  p99Ms: number;
  answered: number;
  [detail: string]: unknown;
}

export interface CellRecord {
  scenario: string;
  target: 'service' | 'pgbench' | 'ceiling';
  concurrency: number;
  variant?: string;
  /** Median over the runs: messages (or pgbench transactions) per second. */
  messagesPerSec: number;
  p50Ms: number;
  p99Ms: number;
  errors: number;
  peakRssMb: number | null;
  /** Median CPU ms per message: the server process, PostgreSQL (throwaway cluster only), the load generator. */
  cpuMsPerMessage: { server: number; postgres: number | null; loadGenerator: number } | null;
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

/** Each target of the issue against this run's figures (null: not measured in this run). */
export function checkTargets(record: RunRecord): TargetCheck[] {
  const cell = (scenario: string, target: CellRecord['target'], c: number) =>
    record.cells.find((x) => x.scenario === scenario && x.target === target && x.concurrency === c);
  const s1 = cell('unique', 'service', 32);
  const p1 = cell('unique', 'pgbench', 32);
  const s2 = cell('duplicates', 'service', 32);
  const s3 = cell('hot', 'service', 32);
  const p3 = cell('hot', 'pgbench', 32);
  const rssCells = record.cells.filter((x) => x.target === 'service' && x.peakRssMb !== null && x.scenario !== 'pglite');
  const rss = rssCells.length > 0 ? Math.max(...rssCells.map((x) => x.peakRssMb!)) : undefined;
  const checks: TargetCheck[] = [];
  const add = (target: string, a: number | undefined, figure: string, pass: (v: number) => boolean) =>
    checks.push({ target, figure: a === undefined || !Number.isFinite(a) ? 'not measured' : figure, met: a === undefined || !Number.isFinite(a) ? null : pass(a) });

  const r1 = s1 && p1 ? s1.messagesPerSec / p1.messagesPerSec : undefined;
  add('(1) unique at 32: ≥ 0.8× pgbench', r1, `${f0(s1?.messagesPerSec)} / ${f0(p1?.messagesPerSec)} = ${f2(r1)}×`, (v) => v >= 0.8);
  const r2 = s2 && s1 ? s2.messagesPerSec / s1.messagesPerSec : undefined;
  add('(2) duplicates at 32: ≥ 2× unique', r2, `${f0(s2?.messagesPerSec)} / ${f0(s1?.messagesPerSec)} = ${f2(r2)}×`, (v) => v >= 2);
  const r3 = s3 && p3 ? s3.messagesPerSec / p3.messagesPerSec : undefined;
  add('(3) hot book at 32: ≥ 0.8× pgbench', r3, `${f0(s3?.messagesPerSec)} / ${f0(p3?.messagesPerSec)} = ${f2(r3)}×`, (v) => v >= 0.8);
  add('(1) p99 at 32 < 25 ms', s1?.p99Ms, `${f1(s1?.p99Ms)} ms`, (v) => v < 25);
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
  lines.push(`Latest run: **${record.date.slice(0, 16).replace('T', ' ')} UTC**, \`${record.command}\` → [${resultsPath}](${resultsPath})${record.failed ? ' — **FAILED** (unexpected statuses, errors or broken invariants: these figures do not count)' : ''}.`);
  lines.push('');
  lines.push(
    `Machine: ${m.cpus} × ${m.cpuModel}, ${m.memoryGb} GB, ${m.kernel}; PostgreSQL ${m.postgres}; Node ${m.node}; ${m.loadGenerator}. ` +
      `Service: ${String(record.settings.service)}. PostgreSQL: ${String(record.settings.postgres)}. ` +
      `${String(record.settings.secondsPerCell)} s per cell, median of ${String(record.settings.repeat)} run(s).`,
  );
  lines.push('');
  lines.push('| scenario | c | msgs/s | p50 ms | p99 ms | errors | peak RSS MB | pgbench tps | ÷ pgbench | ceiling req/s | ÷ ceiling | CPU ms/msg service + PG (pgbench: PG) |');
  lines.push('|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|');
  const cpu = (x: CellRecord | undefined) =>
    x?.cpuMsPerMessage ? `${x.target === 'pgbench' ? '' : `${f2(x.cpuMsPerMessage.server)} + `}${f2(x.cpuMsPerMessage.postgres ?? undefined)}` : '–';
  const find = (scenario: string, target: CellRecord['target'], c: number) =>
    record.cells.find((x) => x.scenario === scenario && x.target === target && x.concurrency === c);
  const scenarios = [...new Set(record.cells.filter((x) => x.target === 'service').map((x) => x.scenario))];
  for (const scenario of scenarios) {
    for (const s of record.cells.filter((x) => x.scenario === scenario && x.target === 'service')) {
      const p = find(scenario, 'pgbench', s.concurrency);
      const ceil = find('any', 'ceiling', s.concurrency);
      lines.push(
        `| ${LABELS[scenario] ?? scenario} | ${s.concurrency} | ${f0(s.messagesPerSec)}${s.ok ? '' : ' ✗'} | ${f2(s.p50Ms)} | ${f2(s.p99Ms)} | ${s.errors} | ${f0(s.peakRssMb ?? undefined)} | ` +
          `${p ? `${f0(p.messagesPerSec)}${p.ok ? '' : ' ✗'} (p99 ${f1(p.p99Ms)})` : '–'} | ${ratio(s.messagesPerSec, p?.messagesPerSec)} | ` +
          `${ceil ? f0(ceil.messagesPerSec) : '–'} | ${ratio(s.messagesPerSec, ceil?.messagesPerSec)} | ${cpu(s)}${p ? ` (${cpu(p)})` : ''} |`,
      );
    }
  }
  const ceilings = record.cells.filter((x) => x.target === 'ceiling');
  if (ceilings.length > 0) {
    lines.push('');
    lines.push(`HTTP ceiling (bench/ceiling.ts): ${ceilings.map((x) => `c=${x.concurrency}: ${f0(x.messagesPerSec)} req/s, p99 ${f2(x.p99Ms)} ms`).join('; ')}.`);
  }
  lines.push('');
  lines.push(
    `Exactly once, checked in the database after the load: ${record.invariants.ok ? 'holds' : '**BROKEN**'} ` +
      `(${Object.entries(record.invariants.detail).map(([k, v]) => `${k} ${v}`).join(', ')}).`,
  );
  const g = record.growth;
  if (g) {
    lines.push('');
    lines.push(`Growth (scenario 1 at c=${g.concurrency}; medians of ${g.empty.runs.length} runs, the pruning cell once, as pruning empties what it measures):`);
    lines.push('');
    lines.push('| inbox | msgs/s | p50 ms | p99 ms | errors |');
    lines.push('|---|--:|--:|--:|--:|');
    lines.push(`| empty | ${f0(g.empty.messagesPerSec)} | ${f2(g.empty.p50Ms)} | ${f2(g.empty.p99Ms)} | ${g.empty.errors} |`);
    lines.push(`| ${(g.rows / 1e6).toFixed(1)} M rows (inserted in ${f0(g.insertSeconds)} s) | ${f0(g.full.messagesPerSec)} | ${f2(g.full.p50Ms)} | ${f2(g.full.p99Ms)} | ${g.full.errors} |`);
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
  lines.push('');
  lines.push('Targets (2 cores shared by PostgreSQL, the service and the load generator):');
  lines.push('');
  lines.push('| target | this run | met |');
  lines.push('|---|---|---|');
  for (const t of checkTargets(record)) lines.push(`| ${t.target} | ${t.figure} | ${t.met === null ? '–' : t.met ? 'yes' : '**no**'} |`);
  return lines.join('\n');
}

/** Replaces the generated block of the README (between the markers), or appends one. */
export function renderReadme(existing: string, record: RunRecord, resultsPath: string): string {
  const block = `${START}\n${renderResults(record, resultsPath)}\n${END}`;
  const start = existing.indexOf(START);
  const end = existing.indexOf(END);
  if (start >= 0 && end > start) return existing.slice(0, start) + block + existing.slice(end + END.length);
  return `${existing.trimEnd()}\n\n## Latest results\n\n${block}\n`;
}
