import type { TObject } from 'typebox';
import type { CommandKind } from '../../inbox/kind.js';
import { envelopeSchema, type Envelope } from '../../inbox/command-schemas.js';
import { KeySourceError, resolveMessageKey } from '../../inbox/key-sources.js';
import type { MessageKey } from '../../inbox/message-key.js';
import { MalformedJsonError, NulCharacterError, parseJson } from '../../json/parse-json.js';
import { bodyValidatorCompiler, type BodyValidator } from '../../validation/compile.js';
import { PoisonMessage, rawPayload } from './poison-message.js';

/**
 * Reads the command queues' messages: the envelope `{ messageId?, type?, timestamp?, data }`, parsed and
 * validated like an HTTP body, and its key. A message that can never be read throws a PoisonMessage.
 */
export class EnvelopeReader {
  readonly #validators = new Map<string, BodyValidator<Envelope<TObject>>>();
  readonly #maxBodyBytes: number;

  constructor(queues: readonly { queue: string; command: CommandKind }[], maxBodyBytes: number) {
    this.#maxBodyBytes = maxBodyBytes;
    const compile = bodyValidatorCompiler();
    for (const { queue, command } of queues) {
      this.#validators.set(queue, compile<Envelope<TObject>>(envelopeSchema(command.data, command.name), `amqp:${queue}`, 'body'));
    }
  }

  /** The envelope of a message on `queue`. */
  read(queue: string, content: Buffer): Envelope<TObject> {
    if (content.length > this.#maxBodyBytes) {
      throw new PoisonMessage(
        'payload-too-large',
        `the message is ${content.length} bytes; the limit is ${this.#maxBodyBytes}`,
        rawPayload(content),
      );
    }
    const body = parseContent(content);
    const validation = this.#validators.get(queue)!(body);
    if (!validation.valid) {
      throw new PoisonMessage('invalid-request', `the message does not match the ${queue} schema: ${validation.errors.join('; ')}`, body);
    }
    return validation.body;
  }
}

/** The message's bytes as JSON: UTF-8, no prototype poisoning, no U+0000 in any string. */
function parseContent(content: Buffer): unknown {
  let text: string;
  try {
    text = new TextDecoder('utf-8', { fatal: true, ignoreBOM: false }).decode(content);
  } catch {
    throw new PoisonMessage('malformed-json', 'the message body is not UTF-8', rawPayload(content));
  }
  try {
    return parseJson(text, 'body');
  } catch (error) {
    if (error instanceof MalformedJsonError) throw new PoisonMessage('malformed-json', error.message, rawPayload(content));
    if (error instanceof NulCharacterError) throw new PoisonMessage('invalid-request', error.message, rawPayload(content));
    throw error;
  }
}

const KEY_FAILURE_REASONS = {
  missing: 'missing-message-key',
  invalid: 'invalid-message-key',
  conflict: 'conflicting-message-keys',
} as const;

/** The key: the envelope's messageId or else the AMQP message-id property; two that differ are refused. */
export function messageKeyOf(envelopeId: string | undefined, propertyId: unknown, body: unknown): MessageKey {
  try {
    return resolveMessageKey({}, { body: envelopeId, amqpMessageId: typeof propertyId === 'string' ? propertyId : undefined });
  } catch (error) {
    if (error instanceof KeySourceError) throw new PoisonMessage(KEY_FAILURE_REASONS[error.failure], error.message, body);
    throw error;
  }
}
