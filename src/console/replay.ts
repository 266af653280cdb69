import type { FastifyInstance } from 'fastify';
import type { TObject } from 'typebox';
import { isPassingFailure } from '../db/dialect.js';
import {
  type CommandKind,
  type DeadLetter,
  type Envelope,
  envelopeSchema,
  FingerprintMismatchError,
  InboxError,
  insertDeadLetter,
  isRecordedMessageId,
  type MessageKey,
  producerOfKey,
  scopeKey,
} from '../inbox/machinery.js';
import { MalformedJsonError, parseJsonBody } from '../http/body-parsers.js';
import { ProblemError } from '../http/problem.js';
import { buildValidatorCompiler } from '../http/validation.js';
import { deleteDeadLetter } from './console.repository.js';

/**
 * Replaying a dead letter: its payload runs again through the pipeline its queue feeds (the envelope
 * schema, the key, app.commands), under the key it was recorded with. For poison that a fix has since
 * made valid. A letter whose cause remains is dead-lettered again, with the cause as it is now, and the
 * old letter goes (one transaction); a processed or duplicate one leaves the table.
 */

/** The reason of a key-reuse dead letter (written by the inbox on a 422). */
export const KEY_REUSE_REASON = 'fingerprint-mismatch';
/** The reason of a letter whose command failed unexpectedly when an operator replayed it. */
export const REPLAY_FAILED_REASON = 'replay-failed';

export type ReplayResult =
  | { result: 'processed' | 'duplicate'; consumer: string; messageId: string; outcome: unknown }
  | { result: 'dead-lettered'; consumer: string; messageId: string; reason: string; detail: string; deadLetter: string };

/**
 * Reasons a replay can only meet again, whatever has been fixed since: they are facts about the bytes
 * the letter kept (not JSON or not UTF-8; cut at 64 KiB, so the whole message is gone; no usable key in
 * it), not about the code that read them. A schema refusal (invalid-request) or a failed command may
 * pass after a fix, so those stay replayable.
 */
const UNREPLAYABLE_REASONS = new Map<string, string>([
  ['malformed-json', 'the message is not JSON (or not UTF-8): its bytes are all a replay has, so it would be refused again'],
  ['payload-too-large', 'the message was larger than the limit and only its first 64 KiB were kept, so it cannot be read whole again'],
  ['missing-message-key', 'the message carries no key, so it cannot be processed exactly once: a replay would be refused again'],
  [
    'invalid-message-key',
    'the key the message carries is not a valid key (1-200 visible ASCII characters), so a replay would be refused again',
  ],
]);

/** Why a letter cannot be replayed at all, or undefined when it can be. */
export function notReplayable(
  letter: Pick<DeadLetter, 'consumer' | 'reason'> & { messageId?: string | undefined },
  replayable: ReadonlySet<string>,
) {
  if (letter.reason === KEY_REUSE_REASON) {
    const key = letter.messageId === undefined ? "each letter's key" : `the key ${letter.messageId}`;
    return (
      `${key} was processed by ${letter.consumer} with another payload first; under that key the inbox keeps ` +
      'the first outcome and refuses any other payload (422), so a replay would be refused again. Send this payload under a new ' +
      'key if it is a new command, then discard the letter'
    );
  }
  const lost = UNREPLAYABLE_REASONS.get(letter.reason);
  if (lost !== undefined) return `${lost}. Discard it; if the command is still wanted, the sender must send it again, correctly`;
  if (!replayable.has(letter.consumer)) return `no command queue of this service feeds ${letter.consumer}, so it has no pipeline to run in`;
  return undefined;
}

/** A compiled envelope schema: true (and the body is an envelope) when it validates. */
interface Validator {
  (data: unknown): data is Envelope<TObject>;
  errors?: { instancePath: string; message?: string; params?: Record<string, unknown> }[] | null;
}

/** Thrown inside a replay when the payload still cannot run: it is dead-lettered again with this reason. */
class StillPoison extends Error {
  constructor(
    readonly reason: string,
    message: string,
  ) {
    super(message);
  }
}

/** Failures that say nothing about the message: the letter stays as it is, and the caller is told to retry. */
function isPassing(error: unknown): boolean {
  if (error instanceof InboxError) return true;
  return isPassingFailure(error);
}

function describe(error: unknown): string {
  return error instanceof Error ? error.message : String(error);
}

/** Replays dead letters of the consumers that the service's command queues feed. */
export class DeadLetterReplayer {
  readonly #app: FastifyInstance;
  readonly #commands = new Map<string, CommandKind>();
  readonly #validators = new Map<string, Validator>();

  constructor(app: FastifyInstance, commands: readonly CommandKind[]) {
    this.#app = app;
    const compile = buildValidatorCompiler({});
    for (const command of commands) {
      this.#commands.set(command.consumer, command);
      const schema = envelopeSchema(command.data, command.name);
      this.#validators.set(command.consumer, compile({ schema, httpPart: 'body', method: 'POST', url: `replay:${command.consumer}` }));
    }
  }

  /** The consumers whose letters can be replayed. */
  get consumers(): ReadonlySet<string> {
    return new Set(this.#commands.keys());
  }

  /** Why this letter cannot be replayed, or undefined. */
  whyNot(letter: Pick<DeadLetter, 'consumer' | 'reason'> & { messageId?: string | undefined }): string | undefined {
    return notReplayable(letter, this.consumers);
  }

  /**
   * Runs the letter again. Throws ProblemError not-replayable for a letter that cannot be, and passes on
   * failures that say nothing about the message (in flight, overloaded, database busy or down): then the
   * letter is kept as it was.
   */
  async replay(letter: DeadLetter): Promise<ReplayResult> {
    const why = this.whyNot(letter);
    if (why !== undefined)
      throw new ProblemError('not-replayable', { detail: why, consumer: letter.consumer, messageId: letter.messageId });
    const command = this.#commands.get(letter.consumer)!;
    let key: MessageKey | undefined;
    try {
      const envelope = this.#read(letter);
      key = this.#keyOf(letter, envelope);
      const result = await this.#app.commands.execute(command, key, envelope.data);
      await deleteDeadLetter(this.#app.db, letter.id);
      this.#app.log.warn(
        { consumer: letter.consumer, messageId: key.messageId, deadLetter: letter.id, result: result.kind },
        'dead letter replayed by an operator',
      );
      return { result: result.kind, consumer: letter.consumer, messageId: key.messageId, outcome: result.outcome };
    } catch (error) {
      if (error instanceof FingerprintMismatchError) {
        // The inbox recorded a key-reuse letter of its own: this one is superseded by it.
        await deleteDeadLetter(this.#app.db, letter.id);
        return this.#again(letter, KEY_REUSE_REASON, error.message, error.deadLetterId);
      }
      if (error instanceof StillPoison) return this.#deadLetterAgain(letter, key, error.reason, error.message);
      if (isPassing(error)) throw error;
      return this.#deadLetterAgain(
        letter,
        key,
        REPLAY_FAILED_REASON,
        `replayed by an operator; the command failed again: ${describe(error)}`,
      );
    }
  }

  /** The envelope of the letter's payload, read and validated as the queue reads a message. */
  #read(letter: DeadLetter): Envelope<TObject> {
    let body = letter.payload;
    const raw = body as { base64?: unknown; bytes?: unknown } | null;
    if (raw !== null && typeof raw === 'object' && typeof raw.base64 === 'string' && typeof raw.bytes === 'number') {
      // A body that was not usable JSON is kept as its bytes: read them as the queue would.
      const bytes = Buffer.from(raw.base64, 'base64');
      if (bytes.length < raw.bytes)
        throw new StillPoison('payload-too-large', `the message is ${raw.bytes} bytes; only its start was kept`);
      let text: string;
      try {
        text = new TextDecoder('utf-8', { fatal: true, ignoreBOM: false }).decode(bytes);
      } catch {
        throw new StillPoison('malformed-json', 'the message body is not UTF-8');
      }
      try {
        body = parseJsonBody(text, 'body');
      } catch (error) {
        if (error instanceof MalformedJsonError) throw new StillPoison('malformed-json', error.message);
        if (error instanceof ProblemError) throw new StillPoison('invalid-request', error.message);
        throw error;
      }
    }
    const validate = this.#validators.get(letter.consumer)!;
    if (!validate(body)) {
      const errors = (validate.errors ?? []).map((e) =>
        e.params !== undefined && 'additionalProperty' in e.params
          ? `body${e.instancePath} must not have property "${String(e.params.additionalProperty)}"`
          : `body${e.instancePath} ${e.message ?? 'is invalid'}`,
      );
      throw new StillPoison('invalid-request', `the message does not match the ${letter.consumer} schema: ${errors.join('; ')}`);
    }
    return body;
  }

  /**
   * The key the letter was recorded under, exactly: a producer's letter (`<producer> <id>`) runs in that
   * producer's key space, never under the bare id. The envelope's messageId, if any, must be the id the key
   * was made from. A letter that records no key has none to run under.
   */
  #keyOf(letter: DeadLetter, envelope: Envelope<TObject>): MessageKey {
    const inEnvelope = envelope.messageId;
    if (letter.messageId === '' || !isRecordedMessageId(letter.messageId)) {
      throw new StillPoison('missing-message-key', 'the message carries no usable key, so it cannot be processed once');
    }
    const space = producerOfKey(letter.messageId);
    if (inEnvelope !== undefined && scopeKey(space, { messageId: inEnvelope, source: 'body' }).messageId !== letter.messageId) {
      throw new StillPoison('conflicting-message-keys', `the envelope's messageId ${inEnvelope} differs from the key ${letter.messageId}`);
    }
    return { messageId: letter.messageId, source: letter.keySource };
  }

  /** Writes the letter again with its cause as it is now, and removes the old one, in one transaction. */
  async #deadLetterAgain(letter: DeadLetter, key: MessageKey | undefined, reason: string, detail: string): Promise<ReplayResult> {
    const id = await this.#app.db.transaction().execute(async (trx) => {
      const written = await insertDeadLetter(trx, {
        consumer: letter.consumer,
        messageId: key?.messageId ?? letter.messageId,
        keySource: key?.source ?? letter.keySource,
        payload: letter.payload,
        storedFingerprint: letter.storedFingerprint,
        receivedFingerprint: letter.receivedFingerprint,
        reason,
        receivedAt: this.#app.now(),
        detail,
      });
      await deleteDeadLetter(trx, letter.id);
      return written;
    });
    return this.#again(letter, reason, detail, id);
  }

  #again(letter: DeadLetter, reason: string, detail: string, deadLetter: string): ReplayResult {
    this.#app.log.warn(
      { consumer: letter.consumer, messageId: letter.messageId, replayed: letter.id, deadLetter, reason, detail },
      'dead letter replayed by an operator and dead-lettered again',
    );
    return { result: 'dead-lettered', consumer: letter.consumer, messageId: letter.messageId, reason, detail, deadLetter };
  }
}
