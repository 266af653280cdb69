/**
 * Ajv's errors as a person reads them: one sentence per failing field. Ajv reports every branch of an
 * anyOf (an envelope or the bare data; a union of literals), so a negative quantity in a correct
 * envelope came out as three sentences of which only the first was true. Here a union of literals
 * becomes "must be one of …", and of other alternatives only the one the value got furthest into is
 * reported (the branch whose errors lie deepest in the value): that is the shape the sender meant.
 */

/** The part of an Ajv error object this reads. */
export interface SchemaError {
  instancePath: string;
  schemaPath: string;
  keyword: string;
  params?: Record<string, unknown>;
  message?: string;
}

/** One failing field: where (`body/data/quantity`) and what is wrong with it. */
export interface FieldError {
  location: string;
  message: string;
}

interface Working extends SchemaError {
  /** The allowed values of a union of literals, once collapsed. */
  allowed?: unknown[];
}

const depth = (e: SchemaError) => (e.instancePath === '' ? 0 : e.instancePath.split('/').length - 1);

/** Replaces each anyOf/oneOf error and its branches' errors by what the sender needs to hear. */
function collapseAlternatives(errors: SchemaError[]): Working[] {
  let working: Working[] = [...errors];
  // Innermost alternatives first, so an outer choice sees its branches already collapsed.
  const alternatives = working
    .filter((e) => e.keyword === 'anyOf' || e.keyword === 'oneOf')
    .sort((a, b) => b.schemaPath.length - a.schemaPath.length);
  for (const alternative of alternatives) {
    const prefix = `${alternative.schemaPath}/`;
    const branches = new Map<string, Working[]>();
    for (const e of working) {
      if (!e.schemaPath.startsWith(prefix)) continue;
      const branch = e.schemaPath.slice(prefix.length).split('/')[0]!;
      branches.set(branch, [...(branches.get(branch) ?? []), e]);
    }
    const inBranches = new Set([...branches.values()].flat());
    let kept: Working[];
    const all = [...branches.values()];
    const literals =
      all.length > 0 &&
      all.every(
        (b) =>
          b.length === 1 && (b[0]!.keyword === 'const' || b[0]!.allowed !== undefined) && b[0]!.instancePath === alternative.instancePath,
      );
    if (literals) {
      const allowed = all.flatMap((b) => b[0]!.allowed ?? [b[0]!.params?.allowedValue]);
      kept = [{ ...alternative, keyword: 'enum', allowed }];
    } else if (all.length === 0) {
      kept = [alternative];
    } else {
      // The alternative the value got furthest into; on a tie, the one with fewer complaints, then the first.
      const score = (b: Working[]) => Math.max(...b.map(depth));
      const best = all.reduce((a, b) => (score(b) > score(a) || (score(b) === score(a) && b.length < a.length) ? b : a));
      kept = best;
    }
    const at = working.indexOf(alternative);
    working = [
      ...working.slice(0, at).filter((e) => !inBranches.has(e)),
      ...kept,
      ...working.slice(at + 1).filter((e) => !inBranches.has(e)),
    ];
  }
  return working;
}

const ARTICLE: Record<string, string> = { integer: 'an integer', object: 'an object', array: 'an array', null: 'null' };

function typeName(type: unknown): string {
  const names = (Array.isArray(type) ? type : String(type).split(',')).map(String);
  return names.map((t) => ARTICLE[t] ?? `a ${t}`).join(' or ');
}

const quote = (value: unknown) => JSON.stringify(value);

function sentence(e: Working): string {
  const p = e.params ?? {};
  switch (e.keyword) {
    case 'enum': {
      const allowed = e.allowed ?? (Array.isArray(p.allowedValues) ? p.allowedValues : []);
      return allowed.length === 1 ? `must be ${quote(allowed[0])}` : `must be one of ${allowed.map(quote).join(', ')}`;
    }
    case 'const':
      return `must be ${quote(p.allowedValue)}`;
    case 'required':
      return `must have property ${quote(p.missingProperty)}`;
    case 'additionalProperties':
      return `must not have property ${quote(p.additionalProperty)}`;
    case 'type':
      return `must be ${typeName(p.type)}`;
    case 'format':
      return `must be a ${String(p.format)}${p.format === 'date-time' ? ' (RFC 3339, e.g. 2026-11-30T12:00:00Z)' : ''}`;
    case 'minLength':
      return `must be at least ${String(p.limit)} character${p.limit === 1 ? '' : 's'} long`;
    case 'maxLength':
      return `must be at most ${String(p.limit)} character${p.limit === 1 ? '' : 's'} long`;
    case 'anyOf':
    case 'oneOf':
      return 'matches none of the accepted forms';
    default:
      return e.message ?? 'is invalid';
  }
}

/** One error per failing field, in the order Ajv found them; `context` is body, querystring, params or headers. */
export function fieldErrors(errors: SchemaError[], context: string): FieldError[] {
  const out: FieldError[] = [];
  const seen = new Set<string>();
  for (const e of collapseAlternatives(errors)) {
    const location = `${context}${e.instancePath}`;
    // The first complaint about a field is enough (a too-short key is also off its pattern).
    const key = e.keyword === 'required' || e.keyword === 'additionalProperties' ? `${location}\u0000${sentence(e)}` : location;
    if (seen.has(key)) continue;
    seen.add(key);
    out.push({ location, message: sentence(e) });
  }
  return out;
}

/** The problem's detail: the sentences joined, e.g. "body/data/quantity must be >= 1". */
export function validationDetail(fields: FieldError[]): string {
  return fields.map((f) => `${f.location} ${f.message}`).join('; ');
}
