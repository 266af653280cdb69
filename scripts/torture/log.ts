/** Timestamped progress lines, error descriptions and the invariant violations a run records. */

const started = Date.now();

/** Milliseconds since the run started. */
export function elapsedMs(): number {
  return Date.now() - started;
}

export function say(line: string): void {
  process.stdout.write(`[${(elapsedMs() / 1000).toFixed(1).padStart(6)}s] ${line}\n`);
}

export function describeError(error: unknown): string {
  if (!(error instanceof Error)) return String(error);
  const cause = error.cause instanceof Error ? ` (${(error.cause as { code?: string }).code ?? ''} ${error.cause.message})` : '';
  return `${error.name}: ${error.message}${cause}`;
}

export interface Violation {
  kind: string;
  detail: string;
}

/** Every violation of the run, in order; the first `echoLimit` are also printed as they happen. */
class ViolationLog {
  readonly all: Violation[] = [];
  echoLimit = Number.POSITIVE_INFINITY;

  record(kind: string, detail: string): void {
    this.all.push({ kind, detail });
    if (this.all.length <= this.echoLimit) say(`VIOLATION ${kind}: ${detail}`);
  }

  get count(): number {
    return this.all.length;
  }
}

export const violations = new ViolationLog();

export function violation(kind: string, detail: string): void {
  violations.record(kind, detail);
}
