/// <reference lib="dom" />
import { html } from 'htm/preact';
import { useState } from 'preact/hooks';
import { ApiError, call } from '../api.js';
import type { StuckRecord } from '../api-types.js';
import { ConfirmButton, ErrorLine, Key, message, REFRESH_MS, useRoute, when } from '../components.js';

type Resolution = 'completed' | 'release';

/** Side effects past their lease, each settled by the operator: it happened, or it did not. */
export function AttentionView() {
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
