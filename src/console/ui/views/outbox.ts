/// <reference lib="dom" />
import { html } from 'htm/preact';
import type { PendingBook, Relay } from '../api-types.js';
import { ErrorLine, Key, REFRESH_MS, useRoute, when } from '../components.js';

/** The outbox: this replica's relay, and the pending events by book. */
export function OutboxView() {
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
