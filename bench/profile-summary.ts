/**
 * Summarises a V8 .cpuprofile (node --cpu-prof): self time by function and by package, and the
 * inclusive time of the service's own functions. Usage: tsx bench/profile-summary.ts FILE [top] [--last S]
 * (--last S: only the profile's last S seconds, e.g. the overload cell at the end of a run).
 */
import { readFileSync } from 'node:fs';

interface ProfileNode {
  id: number;
  callFrame: { functionName: string; url: string; lineNumber: number };
  children?: number[];
}
interface Profile {
  nodes: ProfileNode[];
  samples: number[];
  timeDeltas: number[];
}

const args = process.argv.slice(2);
const lastAt = args.indexOf('--last');
const lastSeconds = lastAt >= 0 ? Number(args.splice(lastAt, 2)[1]) : undefined;
const [file, topArg] = args;
if (file === undefined) {
  console.error('usage: tsx bench/profile-summary.ts FILE.cpuprofile [top] [--last SECONDS]');
  process.exit(2);
}
const top = Number(topArg ?? 30);
const profile = JSON.parse(readFileSync(file, 'utf8')) as Profile;
if (lastSeconds !== undefined) keepLast(profile, lastSeconds);

/** Drops the samples taken before the profile's last `seconds`. */
function keepLast(p: Profile, seconds: number): void {
  let t = 0;
  const at = p.timeDeltas.map((d) => (t += d));
  const from = t - seconds * 1e6;
  const keep = at.map((x) => x >= from);
  p.samples = p.samples.filter((_, i) => keep[i]);
  p.timeDeltas = p.timeDeltas.filter((_, i) => keep[i]);
}

const byId = new Map(profile.nodes.map((n) => [n.id, n]));
const parent = new Map<number, number>();
for (const n of profile.nodes) for (const c of n.children ?? []) parent.set(c, n.id);

const selfUs = new Map<number, number>();
profile.samples.forEach((id, i) => selfUs.set(id, (selfUs.get(id) ?? 0) + (profile.timeDeltas[i] ?? 0)));
const total = [...selfUs.values()].reduce((a, b) => a + b, 0);

function pkg(url: string): string {
  if (url === '') return '(native/vm)';
  const nm = url.lastIndexOf('node_modules/');
  if (nm >= 0) {
    const rest = url.slice(nm + 'node_modules/'.length).split('/');
    return rest[0]!.startsWith('@') ? `${rest[0]}/${rest[1]}` : rest[0]!;
  }
  if (url.startsWith('node:')) return 'node:' + url.slice(5).split('/')[0];
  const m = /\/(dist|src)\/(.*)$/.exec(url);
  return m ? `service ${m[2]}` : url;
}
const label = (n: ProfileNode) => `${n.callFrame.functionName || '(anonymous)'} ${pkg(n.callFrame.url)}:${n.callFrame.lineNumber + 1}`;

const fnSelf = new Map<string, number>();
const pkgSelf = new Map<string, number>();
const inclusive = new Map<string, number>();
for (const [id, us] of selfUs) {
  const node = byId.get(id)!;
  fnSelf.set(label(node), (fnSelf.get(label(node)) ?? 0) + us);
  const p = node.callFrame.functionName.startsWith('(') ? node.callFrame.functionName : pkg(node.callFrame.url);
  pkgSelf.set(p, (pkgSelf.get(p) ?? 0) + us);
  // Inclusive: credit every distinct frame on the stack once.
  const seen = new Set<string>();
  for (let cur: number | undefined = id; cur !== undefined; cur = parent.get(cur)) {
    const l = label(byId.get(cur)!);
    if (seen.has(l)) continue;
    seen.add(l);
    inclusive.set(l, (inclusive.get(l) ?? 0) + us);
  }
}

const pct = (us: number) => `${((100 * us) / total).toFixed(1).padStart(5)}%`;
const print = (title: string, m: Map<string, number>, n: number, filter: (k: string) => boolean = () => true) => {
  console.log(`\n${title}`);
  for (const [k, v] of [...m]
    .filter(([k]) => filter(k))
    .sort((a, b) => b[1] - a[1])
    .slice(0, n))
    console.log(`${pct(v)}  ${k}`);
};
console.log(`${file}: ${(total / 1e6).toFixed(1)} s sampled`);
print('self time by package', pkgSelf, top);
print('self time by function', fnSelf, top);
print('inclusive time, service and framework functions', inclusive, top, (k) => /service |fastify|kysely|pg |pg-protocol|ajv|pino/.test(k));
