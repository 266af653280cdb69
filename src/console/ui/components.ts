/// <reference lib="dom" />
import { html } from 'htm/preact';
import { useCallback, useEffect, useRef, useState } from 'preact/hooks';
import { ApiError, call } from './api.js';

/** The pieces every view uses: a route's answer, an error line, a confirm button, a key, a JSON block. */

/** How often the views that follow live figures ask again. */
export const REFRESH_MS = 5000;

export function message(error: unknown): string {
  if (error instanceof ApiError) return `${error.status} ${error.problem.title}${error.problem.detail ? `: ${error.problem.detail}` : ''}`;
  return error instanceof Error ? error.message : String(error);
}

export function when(iso: string | null): string {
  return iso === null ? '—' : new Date(iso).toLocaleString();
}

export function sleep(ms: number): Promise<void> {
  return new Promise((resolve) => setTimeout(resolve, ms));
}

/**
 * A route's latest answer (kept while a reload of the same path loads) or the error of its last attempt.
 * An answer belongs to its path: asking another path shows nothing of the previous one, and an error
 * replaces the answer it follows.
 */
export interface Route<T> {
  data: T | undefined;
  error: string | undefined;
  reload: () => void;
}

/** Loads a route's answer, again on `reload()` and every `everyMs` when given. */
export function useRoute<T>(path: string | null, everyMs?: number): Route<T> {
  const [answer, setAnswer] = useState<{ path: string; data?: T; error?: string } | undefined>(undefined);
  const [tick, setTick] = useState(0);
  const reload = useCallback(() => setTick((t) => t + 1), []);
  useEffect(() => {
    if (path === null) return;
    let live = true;
    call<T>('GET', path).then(
      (body) => live && setAnswer({ path, data: body }),
      (e: unknown) => live && setAnswer({ path, error: message(e) }),
    );
    return () => {
      live = false;
    };
  }, [path, tick]);
  useEffect(() => {
    if (everyMs === undefined) return;
    const timer = setInterval(reload, everyMs);
    return () => clearInterval(timer);
  }, [everyMs, reload]);
  const current = answer !== undefined && answer.path === path ? answer : undefined;
  return { data: current?.data, error: current?.error, reload };
}

export function ErrorLine({ error }: { error: string | undefined }) {
  return error === undefined ? null : html`<p class="error" role="alert">${error}</p>`;
}

/** A two-step button: the first press asks, the second (Confirm) acts. */
export function ConfirmButton(props: {
  label: string;
  question: string;
  onConfirm: () => Promise<void> | void;
  disabled?: boolean;
  kind?: string;
}) {
  const [asking, setAsking] = useState(false);
  const [busy, setBusy] = useState(false);
  const confirmRef = useRef<HTMLButtonElement>(null);
  useEffect(() => {
    if (asking) confirmRef.current?.focus();
  }, [asking]);
  if (!asking) {
    return html`<button type="button" class=${props.kind ?? ''} disabled=${props.disabled} onClick=${() => setAsking(true)}>
      ${props.label}
    </button>`;
  }
  return html`<span class="confirm" role="group" aria-label=${props.question}>
    <span>${props.question}</span>
    <button
      type="button"
      class="danger"
      ref=${confirmRef}
      disabled=${busy}
      onClick=${async () => {
        setBusy(true);
        try {
          await props.onConfirm();
        } finally {
          setBusy(false);
          setAsking(false);
        }
      }}
    >
      Confirm
    </button>
    <button type="button" onClick=${() => setAsking(false)}>Cancel</button>
  </span>`;
}

/** Parts of a key longer than this may break inside, at hyphens; shorter ones never do. */
const LONG_PART = 40;
/** Pieces of a long part are at least this long: a word stays with the number after its hyphen. */
const SHORT_PIECE = 8;

/**
 * A key as the wrapping sees it: the parts after which a line may break (after ".", ":", "/", "|" or
 * "@"), each kept whole; a part longer than a narrow line is cut at its hyphens into pieces of at least
 * SHORT_PIECE characters (so "email-3" never splits, a uuid may between its groups); a piece still
 * longer than LONG_PART breaks anywhere, as the last resort.
 */
export function keyParts(value: string): { text: string; anywhere: boolean }[] {
  const parts = value.match(/[^.:/|@]+[.:/|@]*|[.:/|@]+/g) ?? [value];
  const pieces = parts.flatMap((part) => {
    if (part.length <= LONG_PART) return [part];
    const out: string[] = [];
    for (const bit of part.match(/[^-]+-*|-+/g) ?? [part]) {
      const last = out.length - 1;
      if (last >= 0 && out[last]!.length < SHORT_PIECE) out[last] += bit;
      else out.push(bit);
    }
    // A short tail joins the piece before it.
    if (out.length > 1 && out[out.length - 1]!.length < SHORT_PIECE) out[out.length - 2] += out.pop()!;
    return out;
  });
  return pieces.map((text) => ({ text, anywhere: text.length > LONG_PART }));
}

/** A key (message id, consumer, book) that wraps only between its parts (keyParts), never mid-word. */
export function Key({ value }: { value: string }) {
  return html`<code class="key"
    >${keyParts(value).map(
      (part, i) => html`${i > 0 ? html`<wbr />` : null}<span class=${part.anywhere ? 'long' : undefined}>${part.text}</span>`,
    )}</code
  >`;
}

export function Json({ value, label }: { value: unknown; label: string }) {
  return html`<pre class="json" aria-label=${label} tabindex="0">${JSON.stringify(value, null, 2)}</pre>`;
}
