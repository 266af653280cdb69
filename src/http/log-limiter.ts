/**
 * At most one log line per key (a problem type) and window. Under overload every request is turned
 * away the same way; a line each would cost more than the work the service still does, and say
 * nothing new. The line written after a quiet stretch says how many were left out before it.
 */
export class LogLimiter {
  readonly #windows = new Map<string, { until: number; suppressed: number }>();
  readonly #windowMs: number;
  readonly #nowMs: () => number;

  constructor(windowMs: number, nowMs: () => number) {
    this.#windowMs = windowMs;
    this.#nowMs = nowMs;
  }

  /** undefined: leave this line out; a number: write it, noting that many left out since the last one. */
  admit(key: string): number | undefined {
    const now = this.#nowMs();
    const window = this.#windows.get(key);
    if (window !== undefined && now < window.until) {
      window.suppressed += 1;
      return undefined;
    }
    this.#windows.set(key, { until: now + this.#windowMs, suppressed: 0 });
    return window?.suppressed ?? 0;
  }
}
