/// <reference lib="dom" />
import { html } from 'htm/preact';
import type { Overview } from '../api-types.js';
import { ActivityChart } from '../charts.js';
import { ErrorLine, REFRESH_MS, useRoute, when } from '../components.js';

/** The overview: what needs a person, the figures behind it, and the last minutes of commands. */
export function OverviewView({ go }: { go: (view: 'attention' | 'dead-letters') => void }) {
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
