/**
 * The structured logger the messaging adapters write to: fields first, then the message, as pino's
 * (and so Fastify's) logger takes them. Only the levels they use.
 */
export interface Logger {
  info(fields: object, message: string): void;
  warn(fields: object, message: string): void;
  error(fields: object, message: string): void;
}
