/// <reference lib="dom" />
import { html } from 'htm/preact';
import { useState } from 'preact/hooks';
import { call } from '../api.js';
import type { Letter, ReplayResult } from '../api-types.js';
import { ConfirmButton, Json, Key, message, when } from '../components.js';

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
export function Letters({ letters, onChange }: { letters: Letter[]; onChange: () => void }) {
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
