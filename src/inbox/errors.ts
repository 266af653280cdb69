/**
 * What the inbox answers instead of an outcome. Every refusal is an InboxError naming the consumer and
 * the message; each subclass carries what a caller needs to act on it. The HTTP error handler maps each
 * to one problem type; the AMQP consumer to an ack, a dead letter or a requeue.
 */
export abstract class InboxError extends Error {
  constructor(
    readonly consumer: string,
    readonly messageId: string,
    message: string,
    options?: ErrorOptions,
  ) {
    super(message, options);
  }
}

/** Another transaction holds the message's claim; nothing was recorded for this copy. */
export class InFlightError extends InboxError {
  override readonly name = 'InFlightError';
  constructor(
    consumer: string,
    messageId: string,
    /** Seconds the sender should wait before retrying. */
    readonly retryAfterSeconds: number,
    options?: ErrorOptions,
  ) {
    super(consumer, messageId, `message ${messageId} is being processed by ${consumer} in another transaction`, options);
  }
}

/** The key was processed before with another payload; this copy was dead-lettered, never applied. */
export class FingerprintMismatchError extends InboxError {
  override readonly name = 'FingerprintMismatchError';
  constructor(
    consumer: string,
    messageId: string,
    readonly storedFingerprint: string,
    readonly receivedFingerprint: string,
    readonly deadLetterId: string,
  ) {
    super(consumer, messageId, `message ${messageId} was processed by ${consumer} before with a different payload`);
  }
}

/** An earlier attempt started a side effect and recorded no outcome: an operator (or a safe resend) settles it. */
export class NeedsReconciliationError extends InboxError {
  override readonly name = 'NeedsReconciliationError';
  constructor(
    consumer: string,
    messageId: string,
    readonly receivedAt: Date,
  ) {
    super(consumer, messageId, `an earlier attempt of ${consumer} for message ${messageId} did not record its outcome`);
  }
}

/** Too many commands are waiting for a transaction: this one was refused before anything was recorded. */
export class OverloadedError extends InboxError {
  override readonly name = 'OverloadedError';
  constructor(
    consumer: string,
    messageId: string,
    /** Seconds the sender should wait before retrying. */
    readonly retryAfterSeconds: number,
  ) {
    super(consumer, messageId, `too many ${consumer} commands are waiting; nothing was recorded`);
  }
}

/** A two-phase side effect did nothing (refused, unreachable); the claim was released, so a retry starts clean. */
export class SideEffectNotPerformedError extends InboxError {
  override readonly name = 'SideEffectNotPerformedError';
  readonly reason: EffectNotPerformedError['reason'];
  constructor(consumer: string, messageId: string, cause: EffectNotPerformedError) {
    super(consumer, messageId, cause.message, { cause });
    this.reason = cause.reason;
  }
}

/**
 * A two-phase side effect may or may not have happened; the record stays in progress (its lease ended,
 * the attempt being over) until a safe resend or an operator settles it.
 */
export class SideEffectOutcomeUnknownError extends InboxError {
  override readonly name = 'SideEffectOutcomeUnknownError';
  readonly reason: EffectOutcomeUnknownError['reason'];
  constructor(consumer: string, messageId: string, cause: EffectOutcomeUnknownError) {
    super(consumer, messageId, cause.message, { cause });
    this.reason = cause.reason;
  }
}

/**
 * Thrown by a two-phase side effect that is sure it did nothing: its receiver refused the request, or
 * could not be reached at all.
 */
export class EffectNotPerformedError extends Error {
  override readonly name: string = 'EffectNotPerformedError';
  constructor(
    readonly reason: 'refused' | 'unreachable',
    message: string,
    options?: ErrorOptions,
  ) {
    super(message, options);
  }
}

/**
 * Thrown by a two-phase side effect whose request may have reached its receiver: no answer came (a
 * timeout, a connection lost after the request went out), or the answer does not prove that nothing
 * was done (a 5xx from a gateway that forwarded it, a 409 while the receiver works on the same key).
 */
export class EffectOutcomeUnknownError extends Error {
  override readonly name: string = 'EffectOutcomeUnknownError';
  constructor(
    readonly reason: 'no-answer' | 'failed',
    message: string,
    options?: ErrorOptions,
  ) {
    super(message, options);
  }
}

/** What an error says, for a log line or a recorded failure: its message, else `fallback`. */
export function errorMessage(error: unknown, fallback = String(error)): string {
  if (error instanceof Error) return error.message || fallback;
  return typeof error === 'string' && error !== '' ? error : fallback;
}
