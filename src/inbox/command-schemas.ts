import { Type, type Static, type TObject, type TSchema } from 'typebox';
import { KEY_SOURCES } from './key-sources.js';
import { MESSAGE_ID_PATTERN, RECORDED_MESSAGE_ID_PATTERN } from './message-key.js';

/** Schemas shared by every command route: the envelope forms and the recorded-result body. */

export const MessageId = Type.String({
  pattern: MESSAGE_ID_PATTERN,
  minLength: 1,
  maxLength: 200,
  description: '1-200 visible ASCII characters, generated once by the producer and kept across retries',
});

/** A key as the inbox records it: a message id, or `<producer> <message id>` for a producer's message. */
export const RecordedMessageId = Type.String({
  pattern: RECORDED_MESSAGE_ID_PATTERN,
  minLength: 1,
  maxLength: 200,
  description:
    "The key as recorded: the sender's message id, or for a producer's message `<producer> <message id>` (one space between them)",
});

export const Uuid = Type.String({ format: 'uuid' });

/** The canonical form of a Uuid value: lower case (SQL Server also returns uniqueidentifier in upper case). */
export function normalizeUuid(value: string): string {
  return value.toLowerCase();
}

/** `{ messageId?, type?, timestamp?, data }`: messageId may instead come from a header. */
export function envelopeSchema<S extends TSchema>(data: S, name: string) {
  return Type.Object(
    {
      messageId: Type.Optional(MessageId),
      type: Type.Optional(
        Type.String({ minLength: 1, maxLength: 200, description: "The event type, for the sender's records; not interpreted" }),
      ),
      timestamp: Type.Optional(Type.String({ format: 'date-time', description: 'When the sender produced the message; not interpreted' })),
      data,
    },
    { additionalProperties: false, title: `${name} envelope`, description: 'JSON envelope; the key is messageId or a header' },
  );
}

/** A structured-mode CloudEvents 1.0 event whose `data` is the command. Extension attributes are allowed. */
export function cloudEventSchema<S extends TSchema>(data: S, name: string) {
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
      // Extension attributes: any other lower-case alphanumeric name (1-20 characters) with a string,
      // integer or boolean value. Said with propertyNames rather than patternProperties because the
      // OpenAPI generator rewrites patternProperties into an additionalProperties schema that admits
      // any name, and the published contract must be the schema the server validates.
      additionalProperties: { anyOf: [{ type: 'string' }, { type: 'integer' }, { type: 'boolean' }] },
      propertyNames: { pattern: '^[a-z0-9]{1,20}$' },
      title: `${name} CloudEvent`,
      description: 'CloudEvents 1.0 structured mode; the key is source + id',
    },
  );
}

/** A JSON envelope carrying data of schema S. */
export type Envelope<S extends TSchema> = Static<ReturnType<typeof envelopeSchema<S>>>;
/** A structured-mode CloudEvent carrying data of schema S. */
export type CloudEvent<S extends TSchema> = Static<ReturnType<typeof cloudEventSchema<S>>>;
/** Any body a command route accepts: an envelope, a structured CloudEvent, or (binary mode) the bare data. */
export type CommandBody<S extends TObject> = Envelope<S> | CloudEvent<S> | Static<S>;

/** Named request examples per media type (OpenAPI Example Objects). */
export interface CommandExamples {
  json: Record<string, unknown>;
  cloudEvent: Record<string, unknown>;
}

/**
 * The body a command route accepts, per media type. `x-examples` becomes the media type's `examples`
 * in the OpenAPI document; the validator ignores it.
 */
export function commandBody(data: TSchema, name: string, examples?: CommandExamples) {
  return {
    content: {
      'application/json': {
        schema: Type.Union([envelopeSchema(data, name), { ...data, title: `${name} data (CloudEvents binary mode)` }], {
          description: 'An envelope, or, with ce-* headers (CloudEvents binary mode), the bare data',
          ...(examples === undefined ? {} : { 'x-examples': examples.json }),
        }),
      },
      'application/cloudevents+json': {
        schema: { ...cloudEventSchema(data, name), ...(examples === undefined ? {} : { 'x-examples': examples.cloudEvent }) },
      },
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
    'idempotency-key': Type.Optional(
      Type.String({
        description:
          'The key, bare or as a structured-field string ("abc"); leave empty when the key is in the body, a CloudEvent or webhook-id',
      }),
    ),
    'ce-specversion': Type.Optional(
      Type.String({ description: 'CloudEvents binary mode: 1.0. With ce-id, ce-source and ce-type, the body is the bare data' }),
    ),
    'ce-id': Type.Optional(Type.String({ description: 'CloudEvents binary mode: the event id; the key is ce-source|ce-id' })),
    'ce-source': Type.Optional(
      Type.String({ description: "CloudEvents binary mode: the event source, a URI reference naming the sender's context" }),
    ),
    'ce-type': Type.Optional(
      Type.String({ description: "CloudEvents binary mode: the event type, for the sender's records; not interpreted" }),
    ),
    'webhook-id': Type.Optional(Type.String({ description: 'Standard Webhooks: the message id, used as the key' })),
    'webhook-timestamp': Type.Optional(
      Type.String({ description: 'Standard Webhooks: Unix seconds; where signatures are verified, within 5 minutes of the server clock' }),
    ),
    'webhook-signature': Type.Optional(
      Type.String({
        description:
          'Standard Webhooks: `v1,` followed by the base64 HMAC-SHA256 of `id.timestamp.body`; required where signatures are verified',
      }),
    ),
  },
  { additionalProperties: true },
);
