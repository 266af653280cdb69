import { appendFile, mkdir } from 'node:fs/promises';
import { dirname } from 'node:path';
import type { Config } from '../config.js';
import { EffectNotPerformedError, EffectOutcomeUnknownError } from '../inbox/machinery.js';

/** The email side effect's port: one implementation writes lines to a file, one POSTs to a provider. */

export interface Email {
  to: string;
  subject: string;
  text: string;
}

export interface SentEmail {
  /** The provider's id for the message, when it gives one. */
  providerMessageId: string | null;
}

export interface EmailProvider {
  readonly name: string;
  /** The provider honours Idempotency-Key: a repeated send with the same key delivers nothing new. */
  readonly deduplicates: boolean;
  /**
   * Sends one email. Throws EmailNotSentError when it is sure nothing was sent, EmailOutcomeUnknownError
   * when the request may have been delivered (a timeout after it went out, an answer that proves nothing).
   */
  send(idempotencyKey: string, email: Email): Promise<SentEmail>;
}

/** Nothing was sent: the provider refused the request itself (a 4xx that proves it), or could not be reached at all. */
export class EmailNotSentError extends EffectNotPerformedError {
  override readonly name: string = 'EmailNotSentError';
}

/** The request may have reached the provider; whether the email went out is unknown. */
export class EmailOutcomeUnknownError extends EffectOutcomeUnknownError {
  override readonly name: string = 'EmailOutcomeUnknownError';
}

/** Appends one JSON line per email to a file: the default, for running the service alone. */
export function logEmailProvider(file: string, deduplicates: boolean): EmailProvider {
  return {
    name: 'log',
    deduplicates,
    async send(idempotencyKey, email) {
      await mkdir(dirname(file), { recursive: true });
      await appendFile(file, `${JSON.stringify({ at: new Date().toISOString(), idempotencyKey, ...email })}\n`, 'utf8');
      return { providerMessageId: null };
    },
  };
}

const NOTHING_SENT_CODES = new Set(['ECONNREFUSED', 'ENOTFOUND', 'EAI_AGAIN', 'EHOSTUNREACH', 'ENETUNREACH']);

/**
 * Only a 4xx proves the provider did not act: it refused the request itself. Not 408 (it gave up reading
 * the request, perhaps after acting on it), 409 (a provider that deduplicates answers it while it is
 * still working on, or has done, the same Idempotency-Key), 425 (too early: it may act on a replay) or
 * 429 (a gateway that retries a request it already forwarded may be the one throttled):
 * for these, as for a 5xx (a gateway's 502 may come after the provider acted) and anything else, the
 * outcome is unknown. The record is kept: a provider that deduplicates gets the same key again on the
 * next copy, otherwise an operator settles it. Releasing on any of them could send the email twice.
 */
function provesNothingSent(status: number): boolean {
  return status >= 400 && status < 500 && status !== 408 && status !== 409 && status !== 425 && status !== 429;
}

function causeCode(error: unknown): string | undefined {
  let current: unknown = error;
  for (let depth = 0; depth < 5 && typeof current === 'object' && current !== null; depth++) {
    const code = (current as { code?: unknown }).code;
    if (typeof code === 'string') return code;
    current = (current as { cause?: unknown }).cause;
  }
  return undefined;
}

/** POSTs the email as JSON with an Idempotency-Key header, bounded by a timeout. */
export function httpEmailProvider(url: string, deduplicates: boolean, timeoutMs: number): EmailProvider {
  return {
    name: 'http',
    deduplicates,
    async send(idempotencyKey, email) {
      let response: Response;
      try {
        response = await fetch(url, {
          method: 'POST',
          headers: { 'content-type': 'application/json', 'idempotency-key': idempotencyKey },
          body: JSON.stringify(email),
          signal: AbortSignal.timeout(timeoutMs),
        });
      } catch (error) {
        const code = causeCode(error);
        if (code !== undefined && NOTHING_SENT_CODES.has(code)) {
          throw new EmailNotSentError('unreachable', `email provider unreachable (${code})`, { cause: error });
        }
        // A timeout or a connection lost mid-request (ECONNRESET, UND_ERR_SOCKET): the provider may have acted on it.
        const reason = code === undefined ? `within ${timeoutMs} ms` : `(${code})`;
        throw new EmailOutcomeUnknownError('no-answer', `no answer from the email provider ${reason}`, { cause: error });
      }
      const text = await response.text().catch(() => '');
      if (!response.ok) {
        if (provesNothingSent(response.status)) throw new EmailNotSentError('refused', `email provider answered ${response.status}`);
        throw new EmailOutcomeUnknownError('failed', `email provider answered ${response.status}`);
      }
      let providerMessageId: string | null = null;
      try {
        const body = JSON.parse(text) as { id?: unknown };
        if (typeof body.id === 'string') providerMessageId = body.id.slice(0, 200);
      } catch {
        // a provider that answers 2xx without JSON still accepted the email
      }
      return { providerMessageId };
    },
  };
}

/** The provider chosen by EMAIL_PROVIDER. */
export function emailProviderFor(config: Config): EmailProvider {
  if (config.emailProvider === 'log') return logEmailProvider(config.emailLogFile, config.emailProviderIdempotent);
  // loadConfig refuses EMAIL_PROVIDER=http without a URL; a config built by hand may not have been through it.
  if (config.emailProviderUrl === undefined) throw new Error('EMAIL_PROVIDER=http needs EMAIL_PROVIDER_URL');
  return httpEmailProvider(config.emailProviderUrl, config.emailProviderIdempotent, config.emailProviderTimeoutMs);
}
