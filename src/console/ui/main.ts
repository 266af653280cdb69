/// <reference lib="dom" />
import { html } from 'htm/preact';
import { render } from 'preact';
import { useCallback, useEffect, useRef, useState } from 'preact/hooks';
import 'uplot/dist/uPlot.min.css';
import './console.css';
import { ApiError, call, onUnauthorized, savedToken, saveToken, segment } from './api.js';
import { ActivityChart, type Overview } from './charts.js';
import { CONSUMERS } from '../../command-kinds.js';

/**
 * The operator console: views over the admin routes. Every figure is what a route answered, every
 * button one admin call (or, for a group, the same call repeated until the route says nothing is left).
 */

type View = 'overview' | 'attention' | 'dead-letters' | 'lookup' | 'outbox';
const VIEWS: { id: View; label: string }[] = [
  { id: 'overview', label: 'Overview' },
  { id: 'attention', label: 'Needs a person' },
  { id: 'dead-letters', label: 'Dead letters' },
  { id: 'lookup', label: 'Look up a key' },
  { id: 'outbox', label: 'Outbox' },
];
/** Pause between two batches of a group action: a group never floods the service. */
const GROUP_PAUSE_MS = 250;
const GROUP_BATCH = 5;
const REFRESH_MS = 5000;

interface StuckRecord {
  consumer: string;
  messageId: string;
  receivedAt: string;
  attempts: number;
  leaseUntil: string | null;
  downstreamKey: string;
  links: { self: string; reconcile: string };
}
interface Group {
  consumer: string;
  reason: string;
  count: number;
  oldest: string;
  newest: string;
  lastId: string;
  replayable: boolean;
  notReplayableBecause: string | null;
}
interface Letter {
  id: string;
  consumer: string;
  messageId: string;
  keySource: string;
  payload: unknown;
  reason: string;
  detail: string | null;
  receivedAt: string;
  replayable: boolean;
  notReplayableBecause: string | null;
}
interface ReplayResult {
  result: 'processed' | 'duplicate' | 'dead-lettered';
  messageId: string;
  reason?: string;
  detail?: string;
  deadLetter?: string;
}
interface GroupProgress {
  done: number;
  remaining: number;
  items: { id: string; result: string; reason?: string; detail?: string }[];
}
interface InboxRecord {
  consumer: string;
  messageId: string;
  state: string;
  keySource: string;
  receivedAt: string;
  completedAt: string | null;
  leaseUntil: string | null;
  attempts: number;
  outcome: unknown;
}
interface OutboxEvent {
  seq: string;
  id: string;
  type: string;
  orderingKey: string;
  occurredAt: string;
  publishedAt: string | null;
  attempts: number;
  lastError: string | null;
}
interface PendingBook {
  bookId: string;
  pending: number;
  heldBehind: number;
  oldestOccurredAt: string | null;
  head: { seq: string; type: string; attempts: number; lastError: string | null } | null;
}
interface Relay {
  replica: { id: string };
  configured: boolean;
  running: boolean;
  connected: boolean;
  consecutiveFailures: number;
  lastPublishedAt: string | null;
  lastFailureAt: string | null;
  lastError: string | null;
}

function message(error: unknown): string {
  if (error instanceof ApiError) return `${error.status} ${error.problem.title}${error.problem.detail ? `: ${error.problem.detail}` : ''}`;
  return error instanceof Error ? error.message : String(error);
}

function when(iso: string | null): string {
  return iso === null ? '—' : new Date(iso).toLocaleString();
}

function sleep(ms: number): Promise<void> {
  return new Promise((resolve) => setTimeout(resolve, ms));
}

/**
 * A route's latest answer (kept while a reload of the same path loads) or the error of its last attempt.
 * An answer belongs to its path: asking another path shows nothing of the previous one, and an error
 * replaces the answer it follows.
 */
interface Route<T> {
  data: T | undefined;
  error: string | undefined;
  reload: () => void;
}

/** Loads a route's answer, again on `reload()` and every `everyMs` when given. */
function useRoute<T>(path: string | null, everyMs?: number): Route<T> {
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

function ErrorLine({ error }: { error: string | undefined }) {
  return error === undefined ? null : html`<p class="error" role="alert">${error}</p>`;
}

/** A two-step button: the first press asks, the second (Confirm) acts. */
function ConfirmButton(props: {
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
function keyParts(value: string): { text: string; anywhere: boolean }[] {
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
function Key({ value }: { value: string }) {
  return html`<code class="key"
    >${keyParts(value).map(
      (part, i) => html`${i > 0 ? html`<wbr />` : null}<span class=${part.anywhere ? 'long' : undefined}>${part.text}</span>`,
    )}</code
  >`;
}

function Json({ value, label }: { value: unknown; label: string }) {
  return html`<pre class="json" aria-label=${label} tabindex="0">${JSON.stringify(value, null, 2)}</pre>`;
}

// ---- Overview ----

function OverviewView({ go }: { go: (view: View) => void }) {
  const { data, error } = useRoute<Overview>('/overview', REFRESH_MS);
  return html`<section aria-labelledby="overview-title">
    <h2 id="overview-title">Overview</h2>
    <${ErrorLine} error=${error} />
    ${
      data === undefined
        ? error === undefined
          ? html`<p>Loading…</p>`
          : null
        : html`
            <p class=${data.attention.needed ? 'attention needed' : 'attention calm'} role="status" data-testid="attention">
              ${data.attention.summary}
            </p>
            <div class="cards">
              <div class="card">
                <h3>Side effects to settle</h3>
                <p class="figure" data-testid="needs-reconciliation">${data.needsReconciliation}</p>
                <button type="button" onClick=${() => go('attention')}>Open Needs a person</button>
              </div>
              <div class="card">
                <h3>Outbox pending</h3>
                <p class="figure" data-testid="outbox-pending">${data.outbox.pending}</p>
                <p>
                  ${`oldest: ${data.outbox.oldestPendingAgeSeconds === null ? 'none' : `${Math.round(data.outbox.oldestPendingAgeSeconds)} s ago`}`}
                  ${data.outbox.relayConfigured ? '' : ' (no relay: AMQP_URL is not set)'}
                </p>
              </div>
              <div class="card">
                <h3>Dead letters</h3>
                <p class="figure" data-testid="dead-letters-total">${data.deadLetters.total}</p>
                <table>
                  <caption class="sr-only">
                    Dead letters by reason
                  </caption>
                  <tbody>
                    ${data.deadLetters.byReason.map(
                      (r) =>
                        html`<tr>
                          <th scope="row">${r.reason}</th>
                          <td>${r.count}</td>
                        </tr>`,
                    )}
                  </tbody>
                </table>
                <button type="button" onClick=${() => go('dead-letters')}>Open Dead letters</button>
              </div>
            </div>
            <${ActivityChart} overview=${data} />
            <p class="small">Replica ${data.replica.id}, ${when(data.generatedAt)}; a point every ${data.activity.intervalSeconds} s.</p>
          `
    }
  </section>`;
}

// ---- Needs a person ----

type Resolution = 'completed' | 'release';

function AttentionView() {
  const { data, error, reload } = useRoute<{ items: StuckRecord[] }>('/inbox/needs-reconciliation', REFRESH_MS);
  const [notes, setNotes] = useState<Record<string, string>>({});
  const [done, setDone] = useState<string | undefined>(undefined);
  const [failed, setFailed] = useState<string | undefined>(undefined);

  async function settle(record: StuckRecord, resolution: Resolution) {
    setFailed(undefined);
    const note = notes[record.links.self];
    try {
      await call('POST', record.links.reconcile, { resolution, ...(note ? { note } : {}) });
      setDone(
        `${record.messageId}: ${resolution === 'completed' ? 'recorded as done; copies are answered with it' : 'released; the next delivery sends it'}`,
      );
    } catch (e) {
      // Settled already (by another operator, or a resend): the record says how.
      if (e instanceof ApiError && (e.slug === 'not-in-progress' || e.status === 404))
        setDone(`${record.messageId}: already settled (${message(e)})`);
      else setFailed(message(e));
    }
    reload();
  }

  return html`<section aria-labelledby="attention-title">
    <h2 id="attention-title">Needs a person</h2>
    <p>
      Side effects that started and recorded no outcome, past their lease: no attempt is working on them. Ask the receiver about the
      downstream key, then say what happened.
    </p>
    <${ErrorLine} error=${error ?? failed} />
    ${done === undefined ? null : html`<p class="ok" role="status">${done}</p>`}
    ${
      data === undefined
        ? null
        : data.items.length === 0
          ? html`<p class="calm" data-testid="nothing-stuck">Nothing to settle.</p>`
          : html`<${StuckTable} records=${data.items} notes=${notes} onNotes=${setNotes} onSettle=${settle} />`
    }
  </section>`;
}

/** The records past their lease, one row each, with the operator's note and the two ways to settle. */
function StuckTable(props: {
  records: StuckRecord[];
  notes: Record<string, string>;
  onNotes: (notes: Record<string, string>) => void;
  onSettle: (record: StuckRecord, resolution: Resolution) => Promise<void>;
}) {
  const { records, notes, onNotes, onSettle } = props;
  return html`<div class="table-scroll">
    <table class="list">
      <caption class="sr-only">
        In-progress side effects past their lease
      </caption>
      <thead>
        <tr>
          <th>Consumer</th>
          <th>Key</th>
          <th>Received</th>
          <th>Attempts</th>
          <th>Lease ended</th>
          <th>Downstream key</th>
          <th>Note</th>
          <th>Settle</th>
        </tr>
      </thead>
      <tbody>
        ${records.map(
          (r) =>
            html`<${StuckRow}
              record=${r}
              note=${notes[r.links.self] ?? ''}
              onNote=${(note: string) => onNotes({ ...notes, [r.links.self]: note })}
              onSettle=${(resolution: Resolution) => onSettle(r, resolution)}
            />`,
        )}
      </tbody>
    </table>
  </div>`;
}

/** One record past its lease: its facts, the note field, and a confirm button for each resolution. */
function StuckRow(props: {
  record: StuckRecord;
  note: string;
  onNote: (note: string) => void;
  onSettle: (resolution: Resolution) => Promise<void>;
}) {
  const { record: r, note, onNote, onSettle } = props;
  return html`<tr data-key=${r.messageId}>
    <td><${Key} value=${r.consumer} /></td>
    <td><${Key} value=${r.messageId} /></td>
    <td>${when(r.receivedAt)}</td>
    <td>${r.attempts}</td>
    <td>${when(r.leaseUntil)}</td>
    <td><${Key} value=${r.downstreamKey} /></td>
    <td>
      <input
        type="text"
        aria-label=${`Note for ${r.messageId}`}
        placeholder="why (optional)"
        value=${note}
        onInput=${(e: Event) => onNote((e.target as HTMLInputElement).value)}
      />
    </td>
    <td class="actions">
      <${ConfirmButton} label="It happened" question=${`Record ${r.messageId} as done?`} onConfirm=${() => onSettle('completed')} />
      <${ConfirmButton}
        label="It did not"
        question=${`Release ${r.messageId} so the next delivery runs it?`}
        onConfirm=${() => onSettle('release')}
      />
    </td>
  </tr>`;
}

// ---- Dead letters ----

/** What became of an action on a letter: `ok` when it did what was asked (ran, or was discarded). */
interface ActionResult {
  text: string;
  ok: boolean;
}

/**
 * Letters with their actions. The results of the actions are shown above them, each as what it was: a
 * replay that ran in green, one dead-lettered again or refused as a failure. They belong to these
 * letters: the panel that shows another group or search starts without them.
 */
function Letters({ letters, onChange }: { letters: Letter[]; onChange: () => void }) {
  const [results, setResults] = useState<Record<string, ActionResult>>({});
  async function act(letter: Letter, action: 'replay' | 'discard') {
    let result: ActionResult;
    try {
      if (action === 'discard') {
        await call('DELETE', `/dead-letters/${letter.id}`);
        result = { text: 'discarded', ok: true };
      } else {
        const r = await call<ReplayResult>('POST', `/dead-letters/${letter.id}/replay`);
        result =
          r.result === 'dead-lettered'
            ? {
                text: `replay failed, dead-lettered again (${r.reason ?? ''}): ${r.detail ?? ''} — new letter #${r.deadLetter ?? ''}`,
                ok: false,
              }
            : { text: `${r.result}: it ran under its key`, ok: true };
      }
    } catch (e) {
      result = { text: `${action} failed: ${message(e)}`, ok: false };
    }
    setResults((all) => ({ ...all, [letter.id]: result }));
    onChange();
  }
  return html`${Object.entries(results).map(([id, r]) =>
      r.ok
        ? html`<p class="result ok" role="status" data-result=${id}>#${id}: ${r.text}</p>`
        : html`<p class="result failed" role="alert" data-result=${id}>#${id}: ${r.text}</p>`,
    )}
    <ul class="letters">
      ${letters.map(
        (l) =>
          html`<li class="letter" data-letter=${l.id} aria-label=${`Dead letter ${l.id}`}>
            <p>
              <strong>#${l.id}</strong>${' '}<${Key}
                value=${l.consumer}
              />${' · '}${l.messageId === '' ? '(no key)' : html`<${Key} value=${l.messageId} />`}${` · ${l.reason} · ${when(l.receivedAt)}`}
            </p>
            ${l.detail === null ? null : html`<p class="detail">${l.detail}</p>`}
            <${Json} value=${l.payload} label=${`Payload of dead letter ${l.id}`} />
            <div class="actions">
              ${
                l.replayable
                  ? html`<${ConfirmButton}
                      label="Replay"
                      question=${`Run #${l.id} again under its key?`}
                      onConfirm=${() => act(l, 'replay')}
                    />`
                  : html`<p class="why-not" data-testid="why-not">Cannot be replayed: ${l.notReplayableBecause}</p>`
              }
              <${ConfirmButton} label="Discard" kind="danger" question=${`Discard #${l.id}?`} onConfirm=${() => act(l, 'discard')} />
            </div>
          </li>`,
      )}
    </ul>`;
}

/** How a group action is going, shown above the groups (the group's row leaves once it is empty). */
interface BulkProgress {
  /** The group it acts on: consumer/reason. */
  group: string;
  label: string;
  verb: 'replayed' | 'discarded';
  total: number;
  done: number;
  again: number;
  remaining: number;
  finished: boolean;
  error?: string;
}

function BulkStatus({ progress }: { progress: BulkProgress | null }) {
  if (progress === null) return null;
  const { label, verb, total, done, again, remaining, finished, error } = progress;
  const failed = again > 0 || error !== undefined;
  return html`<div class=${failed ? 'panel bulk failed' : 'panel bulk'}>
    <p class="progress" role="status">
      <progress max=${total} value=${Math.min(total, done)} aria-label=${`${label}: progress`}></progress>
      ${label}: ${done} of ${total} ${verb}${again > 0 ? `, ${again} dead-lettered again` : ''}${finished ? ` — ${remaining} left` : '…'}
    </p>
    ${error === undefined ? null : html`<p class="error" role="alert">${error}</p>`}
  </div>`;
}

function GroupAction(props: { group: Group; action: 'replay' | 'discard'; report: (p: BulkProgress) => void; onDone: () => void }) {
  const { group, action, report } = props;
  const [running, setRunning] = useState(false);
  const stop = useRef(false);
  const verb = action === 'replay' ? 'Replay' : 'Discard';
  async function run() {
    stop.current = false;
    setRunning(true);
    const progress: BulkProgress = {
      group: groupKey(group),
      label: `${verb} ${group.consumer} / ${group.reason}`,
      verb: action === 'replay' ? 'replayed' : 'discarded',
      total: group.count,
      done: 0,
      again: 0,
      remaining: group.count,
      finished: false,
    };
    report({ ...progress });
    try {
      while (progress.remaining > 0 && !stop.current) {
        const step = await call<GroupProgress>('POST', `/dead-letters/groups/${action}`, {
          consumer: group.consumer,
          reason: group.reason,
          throughId: group.lastId,
          limit: GROUP_BATCH,
        });
        progress.done += step.done;
        progress.again += step.items.filter((i) => i.result === 'dead-lettered').length;
        progress.remaining = step.remaining;
        report({ ...progress });
        if (step.done === 0) break;
        if (progress.remaining > 0) await sleep(GROUP_PAUSE_MS);
      }
    } catch (e) {
      progress.error = message(e);
    }
    report({ ...progress, finished: true });
    setRunning(false);
    props.onDone();
  }
  if (running) return html`<button type="button" onClick=${() => (stop.current = true)}>Stop</button>`;
  return html`<${ConfirmButton}
    label=${`${verb} group`}
    kind=${action === 'discard' ? 'danger' : ''}
    question=${`${verb} all ${group.count} letters of ${group.consumer} / ${group.reason}?`}
    onConfirm=${run}
  />`;
}

function groupKey(group: Pick<Group, 'consumer' | 'reason'>): string {
  return `${group.consumer}/${group.reason}`;
}

/** The dead letters: a search by key, the groups by consumer and reason, and the letters of a search or a group. */
function DeadLettersView() {
  const groups = useRoute<{ items: Group[] }>('/dead-letters/groups');
  const [bulk, setBulk] = useState<BulkProgress | null>(null);
  const [open, setOpenGroup] = useState<Group | null>(null);
  // Opening another group leaves the finished group action of the previous one behind.
  const setOpen = (group: Group) => {
    setOpenGroup(group);
    setBulk((b) => (b !== null && b.finished && b.group !== groupKey(group) ? null : b));
  };
  const [search, setSearch] = useState<string | null>(null);
  const groupPath = open === null ? null : `/dead-letters/groups/letters?consumer=${segment(open.consumer)}&reason=${segment(open.reason)}`;
  const letters = useRoute<{ items: Letter[] }>(groupPath);
  const found = useRoute<{ items: Letter[] }>(search === null ? null : `/dead-letters/search?messageId=${segment(search)}`);
  const refresh = () => {
    groups.reload();
    letters.reload();
    found.reload();
  };
  return html`<section aria-labelledby="dl-title">
    <h2 id="dl-title">Dead letters</h2>
    <${KeySearch} onSearch=${setSearch} />
    ${
      search === null
        ? null
        : html`<${LettersPanel}
            key=${`search:${search}`}
            label="Search results"
            none="No dead letter has this key."
            route=${found}
            onChange=${refresh}
          >
            Letters under <${Key} value=${search} />
          <//>`
    }
    <h3>By reason and consumer</h3>
    <${BulkStatus} progress=${bulk} />
    <${ErrorLine} error=${groups.error} />
    ${groups.data?.items.length === 0 ? html`<p class="calm" data-testid="no-dead-letters">No dead letters.</p>` : null}
    ${
      groups.data === undefined || groups.data.items.length === 0
        ? null
        : html`<${GroupsTable} groups=${groups.data.items} open=${open} onOpen=${setOpen} report=${setBulk} onDone=${refresh} />`
    }
    ${
      open === null
        ? null
        : html`<${LettersPanel}
            key=${`group:${groupKey(open)}`}
            label="Letters of the group"
            none="No letters left in this group."
            route=${letters}
            onChange=${refresh}
          >
            ${open.consumer} / ${open.reason}
          <//>`
    }
  </section>`;
}

/** The search form: a key, trimmed; an empty one closes the results. */
function KeySearch({ onSearch }: { onSearch: (key: string | null) => void }) {
  const [key, setKey] = useState('');
  return html`<form
    class="inline"
    role="search"
    onSubmit=${(e: Event) => {
      e.preventDefault();
      onSearch(key.trim() === '' ? null : key.trim());
    }}
  >
    <label for="dl-key">Search by key</label>
    <input id="dl-key" name="key" type="search" value=${key} onInput=${(e: Event) => setKey((e.target as HTMLInputElement).value)} />
    <button type="submit">Search</button>
  </form>`;
}

/** A panel of dead letters as a route answered them (a search's, a group's), under the heading given as children. */
function LettersPanel(props: { label: string; none: string; route: Route<{ items: Letter[] }>; onChange: () => void; children: unknown }) {
  const { label, none, route, onChange, children } = props;
  return html`<div class="panel" aria-label=${label}>
    <h3>${children}</h3>
    <${ErrorLine} error=${route.error} />
    ${route.data?.items.length === 0 ? html`<p>${none}</p>` : null}
    ${route.data === undefined ? null : html`<${Letters} letters=${route.data.items} onChange=${onChange} />`}
  </div>`;
}

/** What a group's row needs from the view: which group is open, and where group actions report. */
interface GroupsProps {
  open: Group | null;
  onOpen: (group: Group) => void;
  report: (p: BulkProgress) => void;
  onDone: () => void;
}

/** The dead-letter groups, one row each with its letters to show and its group actions. */
function GroupsTable({ groups, open, onOpen, report, onDone }: GroupsProps & { groups: Group[] }) {
  return html`<div class="table-scroll">
    <table class="list">
      <caption class="sr-only">
        Dead-letter groups
      </caption>
      <thead>
        <tr>
          <th>Consumer</th>
          <th>Reason</th>
          <th>Letters</th>
          <th>Oldest</th>
          <th>Newest</th>
          <th>Actions</th>
        </tr>
      </thead>
      <tbody>
        ${groups.map((g) => html`<${GroupRow} group=${g} open=${open} onOpen=${onOpen} report=${report} onDone=${onDone} />`)}
      </tbody>
    </table>
  </div>`;
}

/** One group: its counts and dates, the button that opens its letters, and its two group actions. */
function GroupRow({ group: g, open, onOpen, report, onDone }: GroupsProps & { group: Group }) {
  return html`<tr data-group=${groupKey(g)}>
    <td><${Key} value=${g.consumer} /></td>
    <td class="nowrap">${g.reason}</td>
    <td>${g.count}</td>
    <td>${when(g.oldest)}</td>
    <td>${when(g.newest)}</td>
    <td class="actions">
      <button type="button" aria-expanded=${open?.consumer === g.consumer && open.reason === g.reason} onClick=${() => onOpen(g)}>
        Show letters
      </button>
      ${g.replayable ? html`<${GroupAction} group=${g} action="replay" report=${report} onDone=${onDone} />` : null}
      <${GroupAction} group=${g} action="discard" report=${report} onDone=${onDone} />
      ${g.replayable ? null : html`<p class="why-not">Not replayable: ${g.notReplayableBecause}</p>`}
    </td>
  </tr>`;
}

// ---- One key ----

function LookupView() {
  const [asked, setAsked] = useState<{ consumer: string; key: string } | null>(null);
  const base = asked === null ? null : `/inbox/${segment(asked.consumer)}/${segment(asked.key)}`;
  const record = useRoute<InboxRecord>(base);
  const events = useRoute<{ items: OutboxEvent[] }>(base === null ? null : `${base}/events`);
  const letters = useRoute<{ items: Letter[] }>(
    asked === null ? null : `/dead-letters/search?messageId=${segment(asked.key)}&consumer=${segment(asked.consumer)}`,
  );
  return html`<section aria-labelledby="lookup-title">
    <h2 id="lookup-title">Look up a key</h2>
    <${LookupForm} onAsk=${setAsked} />
    ${
      asked === null
        ? null
        : html`<div class="panel" aria-label="Inbox record">
            <h3>Inbox record</h3>
            <${ErrorLine} error=${record.error} />
            ${record.data === undefined ? null : html`<${RecordFacts} record=${record.data} />`}
            <h3>Outbox events</h3>
            ${
              events.data === undefined
                ? null
                : events.data.items.length === 0
                  ? html`<p>None.</p>`
                  : html`<${EventsTable} events=${events.data.items} />`
            }
            <h3>Dead letters under this key</h3>
            ${
              letters.data === undefined || letters.data.items.length === 0
                ? html`<p>None.</p>`
                : html`<${Letters} letters=${letters.data.items} onChange=${() => letters.reload()} />`
            }
          </div>`
    }
  </section>`;
}

/** The form that asks for one key: a consumer and the key, trimmed (an empty key asks nothing). */
function LookupForm({ onAsk }: { onAsk: (asked: { consumer: string; key: string }) => void }) {
  const [consumer, setConsumer] = useState(CONSUMERS[0]!);
  const [key, setKey] = useState('');
  return html`<form
    class="inline"
    onSubmit=${(e: Event) => {
      e.preventDefault();
      if (key.trim() !== '') onAsk({ consumer, key: key.trim() });
    }}
  >
    <label for="lookup-consumer">Consumer</label>
    <select id="lookup-consumer" value=${consumer} onChange=${(e: Event) => setConsumer((e.target as HTMLSelectElement).value)}>
      ${CONSUMERS.map((c) => html`<option value=${c}>${c}</option>`)}
    </select>
    <label for="lookup-key">Key</label>
    <input id="lookup-key" type="search" value=${key} onInput=${(e: Event) => setKey((e.target as HTMLInputElement).value)} />
    <button type="submit">Look up</button>
  </form>`;
}

/** The inbox record of the key: its state, how it was keyed, when, and its outcome. */
function RecordFacts({ record }: { record: InboxRecord }) {
  return html`<dl class="facts" data-testid="inbox-record">
    <dt>State</dt>
    <dd>${record.state}</dd>
    <dt>Key source</dt>
    <dd>${record.keySource}</dd>
    <dt>Received</dt>
    <dd>${when(record.receivedAt)}</dd>
    <dt>Completed</dt>
    <dd>${when(record.completedAt)}</dd>
    <dt>Attempts</dt>
    <dd>${record.attempts}</dd>
    <dt>Outcome</dt>
    <dd><${Json} value=${record.outcome} label="Outcome" /></dd>
  </dl>`;
}

/** The key's outbox events, published or pending. */
function EventsTable({ events }: { events: OutboxEvent[] }) {
  return html`<div class="table-scroll">
    <table class="list">
      <caption class="sr-only">
        Outbox events of this key
      </caption>
      <thead>
        <tr>
          <th>Seq</th>
          <th>Type</th>
          <th>Book</th>
          <th>Occurred</th>
          <th>Published</th>
          <th>Attempts</th>
          <th>Last error</th>
        </tr>
      </thead>
      <tbody>
        ${events.map(
          (e) =>
            html`<tr>
              <td>${e.seq}</td>
              <td>${e.type}</td>
              <td><${Key} value=${e.orderingKey} /></td>
              <td>${when(e.occurredAt)}</td>
              <td>${e.publishedAt === null ? 'pending' : when(e.publishedAt)}</td>
              <td>${e.attempts}</td>
              <td>${e.lastError ?? ''}</td>
            </tr>`,
        )}
      </tbody>
    </table>
  </div>`;
}

// ---- Outbox ----

function OutboxView() {
  const books = useRoute<{ items: PendingBook[] }>('/outbox/books', REFRESH_MS);
  const relay = useRoute<Relay>('/outbox/relay', REFRESH_MS);
  return html`<section aria-labelledby="outbox-title">
    <h2 id="outbox-title">Outbox</h2>
    <h3>Relay of replica ${relay.data?.replica.id ?? ''}</h3>
    <${ErrorLine} error=${relay.error} />
    ${
      relay.data === undefined
        ? null
        : !relay.data.configured
          ? html`<p>No relay runs here: AMQP_URL is not set, so events stay pending until a replica with it starts.</p>`
          : html`<${RelayFacts} relay=${relay.data} />`
    }
    <h3>Pending by book</h3>
    <${ErrorLine} error=${books.error} />
    ${
      books.data === undefined
        ? null
        : books.data.items.length === 0
          ? html`<p class="calm">Nothing pending.</p>`
          : html`<${PendingBooksTable} books=${books.data.items} />`
    }
  </section>`;
}

/** How this replica's relay is doing. */
function RelayFacts({ relay }: { relay: Relay }) {
  return html`<dl class="facts">
    <dt>Running</dt>
    <dd>${relay.running ? 'yes' : 'no'}</dd>
    <dt>Connected to the broker</dt>
    <dd>${relay.connected ? 'yes' : 'no'}</dd>
    <dt>Failed batches in a row</dt>
    <dd>${relay.consecutiveFailures}</dd>
    <dt>Last published</dt>
    <dd>${when(relay.lastPublishedAt)}</dd>
    <dt>Last failure</dt>
    <dd>
      ${relay.lastFailureAt === null ? 'none' : `${when(relay.lastFailureAt)}: ${relay.lastError ?? ''}${relay.consecutiveFailures === 0 ? ' (publishing again since)' : ''}`}
    </dd>
  </dl>`;
}

/** The books with pending events, each with the event at its head (the one the others wait behind). */
function PendingBooksTable({ books }: { books: PendingBook[] }) {
  return html`<div class="table-scroll">
    <table class="list">
      <caption class="sr-only">
        Pending outbox events by book
      </caption>
      <thead>
        <tr>
          <th>Book</th>
          <th>Pending</th>
          <th>Held behind the oldest</th>
          <th>Oldest event</th>
          <th>Its attempts</th>
          <th>Its last error</th>
        </tr>
      </thead>
      <tbody>
        ${books.map(
          (b) =>
            html`<tr>
              <td><${Key} value=${b.bookId} /></td>
              <td>${b.pending}</td>
              <td>${b.heldBehind}</td>
              <td>${b.head === null ? '' : `#${b.head.seq} ${b.head.type}`} (${when(b.oldestOccurredAt)})</td>
              <td>${b.head?.attempts ?? ''}</td>
              <td>${b.head?.lastError ?? ''}</td>
            </tr>`,
        )}
      </tbody>
    </table>
  </div>`;
}

// ---- Shell ----

function TokenForm() {
  const [value, setValue] = useState(savedToken());
  const [saved, setSaved] = useState(false);
  return html`<form
    class="token"
    onSubmit=${(e: Event) => {
      e.preventDefault();
      saveToken(value);
      setSaved(true);
      location.reload();
    }}
  >
    <label for="admin-token">Admin token</label>
    <input
      id="admin-token"
      type="password"
      autocomplete="off"
      value=${value}
      onInput=${(e: Event) => setValue((e.target as HTMLInputElement).value)}
    />
    <button type="submit">Use token</button>
    ${saved ? html`<span role="status">saved</span>` : null}
  </form>`;
}

/** What the admin routes said of the token: not asked yet, they need one (none given, or it was refused), or they answer. */
type Access = 'checking' | 'token-needed' | 'granted';

/** Until the admin routes answer, only the token field: no view, no "Loading…", no 401 under it. */
function AuthenticationPrompt() {
  const refused = savedToken() !== '';
  return html`<section aria-labelledby="auth-title" data-testid="authentication-prompt">
    <h2 id="auth-title">Authentication required</h2>
    <p>
      ${
        refused
          ? 'The service refused the admin token given. Enter its ADMIN_TOKEN above and press Use token.'
          : "The console's views are admin routes, and this service asks for its admin token (ADMIN_TOKEN). Enter it above and press Use token."
      }
    </p>
  </section>`;
}

function App() {
  const initial = (location.hash.replace('#', '') || 'overview') as View;
  const [view, setView] = useState<View>(VIEWS.some((v) => v.id === initial) ? initial : 'overview');
  const [access, setAccess] = useState<Access>('checking');
  useEffect(() => {
    const off = onUnauthorized(() => setAccess('token-needed'));
    call('GET', '/overview').then(
      () => setAccess((a) => (a === 'checking' ? 'granted' : a)),
      (e: unknown) => setAccess(e instanceof ApiError && e.status === 401 ? 'token-needed' : 'granted'),
    );
    return off;
  }, []);
  const go = (next: View) => {
    setView(next);
    history.replaceState(null, '', `#${next}`);
  };
  const header = html`<header>
    <h1>Bookstore Inventory <span>operator console</span></h1>
    <${TokenForm} />
  </header>`;
  if (access === 'checking') return header;
  if (access === 'token-needed') {
    return html`${header}
      <main><${AuthenticationPrompt} /></main>`;
  }
  return html`${header}
    <nav aria-label="Views">
      ${VIEWS.map(
        (v) => html`<button type="button" aria-current=${view === v.id ? 'page' : undefined} onClick=${() => go(v.id)}>${v.label}</button>`,
      )}
    </nav>
    <main>
      ${view === 'overview' ? html`<${OverviewView} go=${go} />` : null} ${view === 'attention' ? html`<${AttentionView} />` : null}
      ${view === 'dead-letters' ? html`<${DeadLettersView} />` : null} ${view === 'lookup' ? html`<${LookupView} />` : null}
      ${view === 'outbox' ? html`<${OutboxView} />` : null}
    </main>`;
}

render(html`<${App} />`, document.getElementById('app')!);
