/// <reference lib="dom" />
import { html } from 'htm/preact';
import { useState } from 'preact/hooks';
import { segment } from '../api.js';
import type { InboxRecord, Letter, OutboxEvent } from '../api-types.js';
import { ErrorLine, Json, Key, useRoute, when } from '../components.js';
import { Letters } from './letters.js';

/** One key: its inbox record, the outbox events it caused and its dead letters, asked of the consumers given. */
export function LookupView({ consumers }: { consumers: readonly string[] }) {
  const [asked, setAsked] = useState<{ consumer: string; key: string } | null>(null);
  const base = asked === null ? null : `/inbox/${segment(asked.consumer)}/${segment(asked.key)}`;
  const record = useRoute<InboxRecord>(base);
  const events = useRoute<{ items: OutboxEvent[] }>(base === null ? null : `${base}/events`);
  const letters = useRoute<{ items: Letter[] }>(
    asked === null ? null : `/dead-letters/search?messageId=${segment(asked.key)}&consumer=${segment(asked.consumer)}`,
  );
  return html`<section aria-labelledby="lookup-title">
    <h2 id="lookup-title">Look up a key</h2>
    <${LookupForm} consumers=${consumers} onAsk=${setAsked} />
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
function LookupForm(props: { consumers: readonly string[]; onAsk: (asked: { consumer: string; key: string }) => void }) {
  const { consumers, onAsk } = props;
  const [consumer, setConsumer] = useState(consumers[0]!);
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
      ${consumers.map((c) => html`<option value=${c}>${c}</option>`)}
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
