import { Type, type TSchema } from 'typebox';
import { MESSAGE_ID_PATTERN, KEY_SOURCES } from '../inbox/message-key.js';

/** Schemas shared by every command route: the envelope forms and the recorded-result body. */

export const MessageId = Type.String({
  pattern: MESSAGE_ID_PATTERN,
  minLength: 1,
  maxLength: 200,
  description: '1-200 visible ASCII characters, generated once by the producer and kept across retries',
});

export const Uuid = Type.String({ format: 'uuid' });

/** `{ messageId?, type?, timestamp?, data }`: messageId may instead come from a header. */
export function envelopeSchema(data: TSchema, name: string) {
  return Type.Object(
    {
      messageId: Type.Optional(MessageId),
      type: Type.Optional(Type.String({ minLength: 1, maxLength: 200 })),
      timestamp: Type.Optional(Type.String({ format: 'date-time' })),
      data,
    },
    { additionalProperties: false, title: `${name} envelope`, description: 'JSON envelope; the key is messageId or a header' },
  );
}

/** A structured-mode CloudEvents 1.0 event whose `data` is the command. Extension attributes are allowed. */
export function cloudEventSchema(data: TSchema, name: string) {
  return Type.Object(
    {
      specversion: Type.Literal('1.0'),
      id: Type.String({ minLength: 1, maxLength: 1000 }),
      source: Type.String({ minLength: 1, maxLength: 1000 }),
      type: Type.String({ minLength: 1, maxLength: 200 }),
      datacontenttype: Type.Optional(Type.Literal('application/json')),
      dataschema: Type.Optional(Type.String({ maxLength: 1000 })),
      subject: Type.Optional(Type.String({ maxLength: 1000 })),
      time: Type.Optional(Type.String({ format: 'date-time' })),
      data,
    },
    {
      additionalProperties: false,
      // Extension attributes: lower-case alphanumeric names other than the context attributes above.
      patternProperties: {
        '^(?!(specversion|id|source|type|datacontenttype|dataschema|subject|time|data|data_base64)$)[a-z0-9]{1,20}$': {
          anyOf: [{ type: 'string' }, { type: 'integer' }, { type: 'boolean' }],
        },
      },
      title: `${name} CloudEvent`,
      description: 'CloudEvents 1.0 structured mode; the key is source + id',
    },
  );
}

/** The body a command route accepts, per media type. */
export function commandBody(data: TSchema, name: string) {
  return {
    content: {
      'application/json': {
        schema: Type.Union([envelopeSchema(data, name), { ...data, title: `${name} data (CloudEvents binary mode)` }], {
          description: 'An envelope, or, with ce-* headers (CloudEvents binary mode), the bare data',
        }),
      },
      'application/cloudevents+json': { schema: cloudEventSchema(data, name) },
    },
  };
}

export const KeySourceSchema = Type.Union(KEY_SOURCES.map((s) => Type.Literal(s)));

/** What a command route answers: 201 when this request processed the message, 200 for a replay. */
export function commandResultSchema(outcome: TSchema, name: string) {
  return Type.Object(
    {
      status: Type.Union([Type.Literal('processed'), Type.Literal('duplicate')]),
      consumer: Type.String(),
      messageId: Type.String(),
      keySource: KeySourceSchema,
      receivedAt: Type.String({ format: 'date-time' }),
      processedAt: Type.String({ format: 'date-time' }),
      outcome,
    },
    { additionalProperties: false, title: `${name} result` },
  );
}

export const commandHeaders = Type.Object(
  {
    'idempotency-key': Type.Optional(Type.String({ description: 'The key, bare or as a structured-field string ("abc")' })),
    'ce-specversion': Type.Optional(Type.String({ description: 'CloudEvents binary mode' })),
    'ce-id': Type.Optional(Type.String()),
    'ce-source': Type.Optional(Type.String()),
    'ce-type': Type.Optional(Type.String()),
    'webhook-id': Type.Optional(Type.String({ description: 'Standard Webhooks: the key' })),
    'webhook-timestamp': Type.Optional(Type.String()),
    'webhook-signature': Type.Optional(Type.String()),
  },
  { additionalProperties: true },
);
