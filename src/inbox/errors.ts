/** Errors the inbox raises; the HTTP layer maps each to one problem type. */

export class InFlightError extends Error {
  override readonly name = 'InFlightError';
  constructor(
    readonly consumer: string,
    readonly messageId: string,
    /** Seconds the sender should wait before retrying. */
    readonly retryAfterSeconds: number,
    options?: ErrorOptions,
  ) {
    super(`message ${messageId} is being processed by ${consumer} in another transaction`, options);
  }
}

export class FingerprintMismatchError extends Error {
  override readonly name = 'FingerprintMismatchError';
  constructor(
    readonly consumer: string,
    readonly messageId: string,
    readonly storedFingerprint: string,
    readonly receivedFingerprint: string,
    readonly deadLetterId: string,
  ) {
    super(`message ${messageId} was processed by ${consumer} before with a different payload`);
  }
}

export class NeedsReconciliationError extends Error {
  override readonly name = 'NeedsReconciliationError';
  constructor(
    readonly consumer: string,
    readonly messageId: string,
    readonly receivedAt: Date,
  ) {
    super(`an earlier attempt of ${consumer} for message ${messageId} did not record its outcome`);
  }
}

/** The database failed in a way a retry may cure (lost connection, lock wait on a non-claim row). */
export class TransientDatabaseError extends Error {
  override readonly name = 'TransientDatabaseError';
}

/** Too many commands are waiting for a transaction: this one was refused before anything was recorded. */
export class OverloadedError extends Error {
  override readonly name = 'OverloadedError';
  constructor(
    readonly consumer: string,
    /** Seconds the sender should wait before retrying. */
    readonly retryAfterSeconds: number,
  ) {
    super(`too many ${consumer} commands are waiting; nothing was recorded`);
  }
}
