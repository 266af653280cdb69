/// <reference lib="dom" />
import { html } from 'htm/preact';
import { useRef, useState } from 'preact/hooks';
import { call } from '../api.js';
import type { Group, GroupProgress } from '../api-types.js';
import { ConfirmButton, message, sleep } from '../components.js';

/** Pause between two batches of a group action: a group never floods the service. */
const GROUP_PAUSE_MS = 250;
const GROUP_BATCH = 5;

/** How a group action is going, shown above the groups (the group's row leaves once it is empty). */
export interface BulkProgress {
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

export function BulkStatus({ progress }: { progress: BulkProgress | null }) {
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

export function GroupAction(props: { group: Group; action: 'replay' | 'discard'; report: (p: BulkProgress) => void; onDone: () => void }) {
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

export function groupKey(group: Pick<Group, 'consumer' | 'reason'>): string {
  return `${group.consumer}/${group.reason}`;
}
