/// <reference lib="dom" />
import { html } from 'htm/preact';
import { useState } from 'preact/hooks';
import { segment } from '../api.js';
import type { Group, Letter } from '../api-types.js';
import { ErrorLine, Key, type Route, useRoute, when } from '../components.js';
import { BulkStatus, type BulkProgress, GroupAction, groupKey } from './group-action.js';
import { Letters } from './letters.js';

/** The dead letters: a search by key, the groups by consumer and reason, and the letters of a search or a group. */
export function DeadLettersView() {
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
