/** HTTP requests to the service processes, counted, with 5xx answers checked against the fault windows. */
import { overlapsFault } from './faults.js';
import { describeError, violation } from './log.js';
import { pick, type Rng } from './random.js';
import { stats } from './report.js';
import type { Service } from './services.js';

export interface Answer {
  status: number;
  /** The parsed JSON body, the text if it is not JSON, or undefined if empty. */
  body: unknown;
  replayed: boolean;
  retryAfterMs: number | undefined;
}

export type SendResult = { ok: true; answer: Answer } | { ok: false; error: string };

/** The `type` of a problem-details body, if the body has one. */
export function problemType(body: unknown): unknown {
  return typeof body === 'object' && body !== null && 'type' in body ? body.type : undefined;
}

export function pickTarget(rng: Rng, services: readonly Service[], exclude?: Service): Service {
  const candidates = services.filter((s) => s !== exclude);
  const up = candidates.filter((s) => s.up);
  // Mostly to a live process, as a load balancer would; sometimes to a dead one, as a stale one would.
  return pick(rng, up.length > 0 && rng() < 0.9 ? up : candidates);
}

export async function httpRequest(
  service: Service,
  method: string,
  path: string,
  headers: Record<string, string>,
  body: string | undefined,
  timeoutMs: number,
): Promise<SendResult> {
  const sentAt = Date.now();
  try {
    const res = await fetch(`${service.baseUrl}${path}`, {
      method,
      headers,
      ...(body === undefined ? {} : { body }),
      signal: AbortSignal.timeout(timeoutMs),
    });
    const text = await res.text();
    let parsed: unknown;
    try {
      parsed = text === '' ? undefined : JSON.parse(text);
    } catch {
      parsed = text;
    }
    if (res.status >= 500) {
      stats.status5xx++;
      stats.status5xxByCode.set(res.status, (stats.status5xxByCode.get(res.status) ?? 0) + 1);
      if (overlapsFault(sentAt, Date.now())) stats.status5xxDuringFaults++;
      else violation('5xx-outside-faults', `${method} ${path} on service ${service.index}: ${res.status} ${text.slice(0, 300)}`);
    }
    const retryAfter = res.headers.get('retry-after');
    return {
      ok: true,
      answer: {
        status: res.status,
        body: parsed,
        replayed: res.headers.get('idempotent-replayed') === 'true',
        retryAfterMs: retryAfter === null || !/^\d+$/.test(retryAfter) ? undefined : Number(retryAfter) * 1000,
      },
    };
  } catch (error) {
    stats.networkErrors++;
    const text = describeError(error);
    if (/timeout|aborted/i.test(text)) stats.timeouts++;
    if (/ECONNREFUSED/.test(text)) stats.refused++;
    return { ok: false, error: text };
  }
}
