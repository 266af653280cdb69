import secureJson from 'secure-json-parse';

/** Text that is not JSON, or JSON that tries prototype poisoning (`__proto__`, `constructor.prototype`). */
export class MalformedJsonError extends Error {
  override readonly name = 'MalformedJsonError';
  /** A client's error wherever it is answered: HTTP reads it as 400. */
  readonly statusCode = 400;
}

/** JSON whose string (value or key) contains U+0000, which no text field accepts. */
export class NulCharacterError extends Error {
  override readonly name = 'NulCharacterError';
  constructor(
    /** Where the string sits: the root's name followed by a JSON pointer (`body/items/0/sku`). */
    readonly location: string,
  ) {
    super(`${location} contains a NUL (U+0000) character, which no text field accepts`);
  }
}

// NUL can only reach a parsed string through this escape; the scan below runs only when it is present.
const SUSPECT_NUL = /\\u0000/i;

/**
 * Where the first string (value or key) containing U+0000 sits, as a JSON pointer, if any.
 * Iterative, so a deeply nested body cannot overflow the stack.
 */
function findNul(root: unknown): string | undefined {
  const pending: { value: unknown; path: string }[] = [{ value: root, path: '' }];
  while (pending.length > 0) {
    const { value, path } = pending.pop()!;
    if (typeof value === 'string') {
      if (value.includes('\u0000')) return path;
    } else if (value !== null && typeof value === 'object') {
      for (const [key, child] of Object.entries(value)) {
        const childPath = `${path}/${key.replaceAll('~', '~0').replaceAll('/', '~1')}`;
        if (key.includes('\u0000')) return childPath;
        pending.push({ value: child, path: childPath });
      }
    }
  }
  return undefined;
}

/**
 * Parses a command's JSON text as every transport must: prototype poisoning refused (MalformedJsonError),
 * and U+0000 in any string refused (NulCharacterError, located under `root`).
 */
export function parseJson(text: string, root: string): unknown {
  let parsed: unknown;
  try {
    parsed = secureJson.parse(text, undefined, { protoAction: 'error', constructorAction: 'error' });
  } catch (error) {
    throw new MalformedJsonError(error instanceof Error ? error.message : 'invalid JSON', { cause: error });
  }
  // PostgreSQL cannot store U+0000 in text and fails the statement (a 500); SQL Server would store it.
  // Refusing it here keeps every database's answer the same, and a client error a 400.
  const nulAt = SUSPECT_NUL.test(text) ? findNul(parsed) : undefined;
  if (nulAt !== undefined) throw new NulCharacterError(`${root}${nulAt}`);
  return parsed;
}
