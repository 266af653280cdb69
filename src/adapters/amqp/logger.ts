/**
 * The structured logger the messaging adapters write to: fields first, then the message, as pino's
 * (and so Fastify's) logger takes them. Only the levels they use.
 */
export interface Logger {
  info(fields: object, message: string): void;
  warn(fields: object, message: string): void;
  error(fields: object, message: string): void;
}

/**
 * The logger an adapter uses when given none: warnings and errors to the console (stderr), each with its
 * fields; the one line per settled delivery (info) is left out. Pass the application's logger (`app.log`)
 * to have them all, structured.
 */
export const consoleLogger: Logger = Object.freeze({
  info: () => {},
  warn: (fields: object, message: string) => console.warn(message, fields),
  error: (fields: object, message: string) => console.error(message, fields),
});
