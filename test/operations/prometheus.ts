import type { FastifyInstance } from 'fastify';

/** Reads one sample from Prometheus text: the value of `name` with exactly these labels, or undefined. */
export function sample(text: string, name: string, labels: Record<string, string> = {}): number | undefined {
  for (const line of text.split('\n')) {
    if (line.startsWith('#')) continue;
    const match = /^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})? (\S+)$/.exec(line);
    if (match === null || match[1] !== name) continue;
    const found: Record<string, string> = {};
    for (const pair of (match[2] ?? '').matchAll(/([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"/g)) found[pair[1]!] = pair[2]!;
    const keys = Object.keys(labels);
    if (keys.length !== Object.keys(found).length || keys.some((k) => found[k] !== labels[k])) continue;
    return Number(match[3]);
  }
  return undefined;
}

/** GET /metrics as text. */
export async function scrape(app: FastifyInstance): Promise<string> {
  const res = await app.inject({ url: '/metrics' });
  if (res.statusCode !== 200) throw new Error(`/metrics answered ${res.statusCode}: ${res.body}`);
  return res.body;
}
