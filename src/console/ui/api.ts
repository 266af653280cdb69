/// <reference lib="dom" />
/**
 * The console's one way to the service: admin routes, with the bearer token the operator typed in.
 * Answers are shown as they come; nothing is decided here.
 */

const TOKEN_KEY = 'bookstore-console-token';

export function savedToken(): string {
  return sessionStorage.getItem(TOKEN_KEY) ?? '';
}

export function saveToken(token: string): void {
  if (token === '') sessionStorage.removeItem(TOKEN_KEY);
  else sessionStorage.setItem(TOKEN_KEY, token);
}

/** A problem document (RFC 9457) the service answered with. */
export interface Problem {
  type: string;
  title: string;
  status: number;
  detail?: string;
  [extra: string]: unknown;
}

export class ApiError extends Error {
  constructor(
    readonly status: number,
    readonly problem: Problem,
  ) {
    super(problem.detail ?? problem.title);
  }

  /** The problem's slug: /problems/not-in-progress -> not-in-progress. */
  get slug(): string {
    return this.problem.type.replace(/^.*\/problems\//, '');
  }
}

const unauthorizedListeners = new Set<() => void>();

/** Calls `listener` whenever an admin route answers 401 (no token, or one it refused); returns the unsubscribe. */
export function onUnauthorized(listener: () => void): () => void {
  unauthorizedListeners.add(listener);
  return () => unauthorizedListeners.delete(listener);
}

/** Calls an admin route (a path relative to the service root) and returns its JSON body. */
export async function call<T>(method: string, path: string, body?: unknown): Promise<T> {
  const headers: Record<string, string> = { accept: 'application/json' };
  const token = savedToken();
  if (token !== '') headers.authorization = `Bearer ${token}`;
  if (body !== undefined) headers['content-type'] = 'application/json';
  const response = await fetch(new URL(path.replace(/^\//, ''), serviceRoot()), {
    method,
    headers,
    body: body === undefined ? null : JSON.stringify(body),
  });
  const text = await response.text();
  const parsed: unknown = text === '' ? null : JSON.parse(text);
  if (!response.ok) {
    const problem =
      parsed !== null && typeof parsed === 'object' && 'title' in parsed
        ? (parsed as Problem)
        : { type: 'about:blank', title: response.statusText, status: response.status };
    if (response.status === 401) for (const listener of unauthorizedListeners) listener();
    throw new ApiError(response.status, problem);
  }
  return parsed as T;
}

/** The service's root: the console is served at <root>console. */
function serviceRoot(): URL {
  return new URL('./', location.href.replace(/\/console\/?(\?.*)?(#.*)?$/, '/'));
}

/** A key as a path segment. */
export function segment(value: string): string {
  return encodeURIComponent(value);
}
