import {
  context,
  defaultTextMapGetter,
  defaultTextMapSetter,
  ProxyTracerProvider,
  ROOT_CONTEXT,
  SpanStatusCode,
  trace,
  type Context,
  type Span,
  type SpanContext,
  type Tracer,
} from '@opentelemetry/api';
import { W3CTraceContextPropagator } from '@opentelemetry/core';
import { FingerprintMismatchError, InboxError, InFlightError, NeedsReconciliationError, OverloadedError } from './errors.js';

/**
 * OpenTelemetry for the inbox and its transports. Only the API is used here: an application that
 * registers a tracer provider (an SDK started from OTEL_* variables, say) gets spans; without
 * one, `activeTracer()` is undefined and every instrumented path skips its span entirely, so the hot
 * path pays one property read.
 */

/** The instrumentation scope of every span the inbox and its transports start. */
export const TRACER_NAME = 'inbox';

/** The inbox's own span attributes, beside the semantic conventions' names. */
export const INBOX_KEY = 'inbox.key';
export const INBOX_CONSUMER = 'inbox.consumer';
export const INBOX_KEY_SOURCE = 'inbox.key_source';
export const INBOX_DECISION = 'inbox.decision';
export const INBOX_ATTEMPT = 'inbox.attempt';
export const INBOX_DOWNSTREAM_KEY = 'inbox.downstream_key';
export const INBOX_DEAD_LETTER_ID = 'inbox.dead_letter.id';

/** What the inbox decided for a delivery, as the `inbox.decision` attribute says it. */
export type InboxDecision =
  'processed' | 'duplicate' | 'in-flight' | 'reused' | 'dead-lettered' | 'needs-reconciliation' | 'overloaded' | 'failed';

/** The W3C trace context of a command, as stored with the events it caused and published with them. */
export interface TraceHeaders {
  readonly traceparent: string;
  readonly tracestate?: string | undefined;
}

const propagator = new W3CTraceContextPropagator();

/**
 * The tracer when a tracer provider is registered, otherwise undefined. The global provider is a proxy
 * until an SDK sets its delegate; asking the proxy for its delegate's tracer costs no allocation.
 */
export function activeTracer(): Tracer | undefined {
  const provider = trace.getTracerProvider();
  return provider instanceof ProxyTracerProvider ? provider.getDelegateTracer(TRACER_NAME) : provider.getTracer(TRACER_NAME);
}

/** The trace context a carrier (HTTP or AMQP headers) holds, on top of `parent` (default: the root). */
export function extractTraceContext(carrier: Record<string, unknown> | undefined, parent: Context = ROOT_CONTEXT): Context {
  if (carrier === undefined) return parent;
  return propagator.extract(parent, carrier, {
    keys: (headers) => defaultTextMapGetter.keys(headers),
    get: (headers, key) => {
      const value = (headers as Record<string, unknown>)[key];
      if (typeof value === 'string') return value;
      // AMQP headers may arrive as buffers (a long string in the table).
      return Buffer.isBuffer(value) ? value.toString('latin1') : undefined;
    },
  });
}

/** The W3C headers of a span context (undefined when it is not valid). */
export function traceHeadersOf(spanContext: SpanContext | undefined): TraceHeaders | undefined {
  if (spanContext === undefined) return undefined;
  const carrier: Record<string, string> = {};
  propagator.inject(trace.setSpanContext(ROOT_CONTEXT, spanContext), carrier, defaultTextMapSetter);
  const { traceparent, tracestate } = carrier;
  if (traceparent === undefined) return undefined;
  return tracestate === undefined ? { traceparent } : { traceparent, tracestate };
}

/** The decision an inbox error stands for. */
export function decisionOfError(error: unknown): InboxDecision {
  if (error instanceof FingerprintMismatchError) return 'reused';
  if (error instanceof InFlightError) return 'in-flight';
  if (error instanceof NeedsReconciliationError) return 'needs-reconciliation';
  if (error instanceof OverloadedError) return 'overloaded';
  return 'failed';
}

/**
 * Ends a span for a failure: an inbox refusal (in flight, reused key…) is the inbox working as meant, so
 * it is recorded as the decision; anything else is an error on the span.
 */
export function endSpanWithError(span: Span, error: unknown): void {
  span.setAttribute(INBOX_DECISION, decisionOfError(error));
  if (error instanceof FingerprintMismatchError) span.setAttribute(INBOX_DEAD_LETTER_ID, error.deadLetterId);
  failSpan(span, error);
}

/** Ends a span that failed: an error status with the exception, unless it is an inbox refusal. */
export function failSpan(span: Span, error: unknown): void {
  if (!(error instanceof InboxError)) {
    span.recordException(error instanceof Error ? error : String(error));
    span.setStatus({ code: SpanStatusCode.ERROR, message: error instanceof Error ? error.message : String(error) });
  }
  span.end();
}

/** Runs `fn` with `span` as the active span. */
export function withSpan<T>(span: Span, fn: () => T): T {
  return context.with(trace.setSpan(context.active(), span), fn);
}
