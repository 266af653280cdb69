/// <reference lib="dom" />
import { html } from 'htm/preact';
import { render } from 'preact';
import { useEffect, useState } from 'preact/hooks';
import 'uplot/dist/uPlot.min.css';
import './console.css';
import { CONSUMERS } from '../../command-kinds.js';
import { ApiError, call, onUnauthorized, savedToken, saveToken } from './api.js';
import { AttentionView } from './views/attention.js';
import { DeadLettersView } from './views/dead-letters.js';
import { LookupView } from './views/lookup.js';
import { OutboxView } from './views/outbox.js';
import { OverviewView } from './views/overview.js';

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
      ${view === 'dead-letters' ? html`<${DeadLettersView} />` : null}
      ${view === 'lookup' ? html`<${LookupView} consumers=${CONSUMERS} />` : null} ${view === 'outbox' ? html`<${OutboxView} />` : null}
    </main>`;
}

render(html`<${App} />`, document.getElementById('app')!);
