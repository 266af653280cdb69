import { context, propagation, trace } from '@opentelemetry/api';
import { AsyncLocalStorageContextManager } from '@opentelemetry/context-async-hooks';
import { W3CTraceContextPropagator } from '@opentelemetry/core';
import { OTLPTraceExporter } from '@opentelemetry/exporter-trace-otlp-http';
import { defaultResource, detectResources, envDetector, resourceFromAttributes } from '@opentelemetry/resources';
import {
  AlwaysOffSampler,
  AlwaysOnSampler,
  BatchSpanProcessor,
  ParentBasedSampler,
  TraceIdRatioBasedSampler,
  TracerProvider,
  type Sampler,
} from '@opentelemetry/sdk-trace';
import { ATTR_SERVICE_NAME } from '@opentelemetry/semantic-conventions';

/**
 * The OpenTelemetry SDK, started from the standard OTEL_* variables alone, and only when they ask for
 * traces: an OTLP endpoint (OTEL_EXPORTER_OTLP_ENDPOINT or OTEL_EXPORTER_OTLP_TRACES_ENDPOINT), or
 * OTEL_TRACES_EXPORTER=otlp. With none of them, or OTEL_SDK_DISABLED=true, or OTEL_TRACES_EXPORTER=none,
 * nothing is started and the instrumented code finds no tracer (src/inbox/tracing.ts).
 */

type Env = Readonly<Record<string, string | undefined>>;

/** A configuration the SDK cannot honour (the service refuses to start, naming it). */
export class TracingConfigError extends Error {
  override readonly name = 'TracingConfigError';
}

/** The running SDK: where it sends, and how to flush and stop it at shutdown. */
export interface Tracing {
  readonly description: string;
  shutdown(): Promise<void>;
}

function value(env: Env, name: string): string | undefined {
  const raw = env[name]?.trim();
  return raw === undefined || raw === '' ? undefined : raw;
}

/** Whether the variables ask for traces (see above). */
export function tracingRequested(env: Env = process.env): boolean {
  if (value(env, 'OTEL_SDK_DISABLED')?.toLowerCase() === 'true') return false;
  const exporters = (value(env, 'OTEL_TRACES_EXPORTER') ?? '')
    .toLowerCase()
    .split(',')
    .map((e) => e.trim());
  if (exporters.includes('none')) return false;
  return (
    value(env, 'OTEL_EXPORTER_OTLP_ENDPOINT') !== undefined ||
    value(env, 'OTEL_EXPORTER_OTLP_TRACES_ENDPOINT') !== undefined ||
    exporters.includes('otlp')
  );
}

/** OTEL_TRACES_SAMPLER and OTEL_TRACES_SAMPLER_ARG, as the specification names them (default parentbased_always_on). */
export function samplerFromEnv(env: Env = process.env): Sampler {
  const name = (value(env, 'OTEL_TRACES_SAMPLER') ?? 'parentbased_always_on').toLowerCase();
  const arg = value(env, 'OTEL_TRACES_SAMPLER_ARG');
  const ratio = () => {
    if (arg === undefined) return 1;
    const n = Number(arg);
    if (!Number.isFinite(n) || n < 0 || n > 1)
      throw new TracingConfigError(`OTEL_TRACES_SAMPLER_ARG must be a ratio from 0 to 1, not "${arg}"`);
    return n;
  };
  switch (name) {
    case 'always_on':
      return new AlwaysOnSampler();
    case 'always_off':
      return new AlwaysOffSampler();
    case 'traceidratio':
      return new TraceIdRatioBasedSampler(ratio());
    case 'parentbased_always_on':
      return new ParentBasedSampler({ root: new AlwaysOnSampler() });
    case 'parentbased_always_off':
      return new ParentBasedSampler({ root: new AlwaysOffSampler() });
    case 'parentbased_traceidratio':
      return new ParentBasedSampler({ root: new TraceIdRatioBasedSampler(ratio()) });
    default:
      throw new TracingConfigError(
        `OTEL_TRACES_SAMPLER "${name}" is not one of always_on, always_off, traceidratio, parentbased_always_on, parentbased_always_off, parentbased_traceidratio`,
      );
  }
}

function positiveInteger(env: Env, name: string): number | undefined {
  const raw = value(env, name);
  if (raw === undefined) return undefined;
  const n = Number(raw);
  if (!Number.isSafeInteger(n) || n <= 0) throw new TracingConfigError(`${name} must be a positive integer, not "${raw}"`);
  return n;
}

/**
 * Starts the SDK when the variables ask for traces (undefined otherwise): spans are batched
 * (OTEL_BSP_*) and sent as OTLP/HTTP with JSON bodies to the endpoint the exporter reads from the
 * OTEL_EXPORTER_OTLP_* variables (headers, timeout, certificates included); the resource is
 * `service.name` bookstore-inventory unless OTEL_SERVICE_NAME or OTEL_RESOURCE_ATTRIBUTES say otherwise.
 * Trace context is read and written as W3C `traceparent`/`tracestate`.
 */
export function startTracing(env: Env = process.env): Tracing | undefined {
  if (!tracingRequested(env)) return undefined;
  const protocol = (value(env, 'OTEL_EXPORTER_OTLP_TRACES_PROTOCOL') ?? value(env, 'OTEL_EXPORTER_OTLP_PROTOCOL'))?.toLowerCase();
  if (protocol === 'grpc') {
    throw new TracingConfigError(
      'OTEL_EXPORTER_OTLP_PROTOCOL=grpc is not supported: the service sends OTLP/HTTP (port 4318), as http/json',
    );
  }
  const exporters = (value(env, 'OTEL_TRACES_EXPORTER') ?? 'otlp')
    .toLowerCase()
    .split(',')
    .map((e) => e.trim());
  const unknown = exporters.filter((e) => e !== 'otlp');
  if (unknown.length > 0) throw new TracingConfigError(`OTEL_TRACES_EXPORTER ${unknown.join(', ')} is not supported: otlp or none`);

  const sampler = samplerFromEnv(env);
  const exporter = new OTLPTraceExporter();
  const maxQueueSize = positiveInteger(env, 'OTEL_BSP_MAX_QUEUE_SIZE');
  const maxExportBatchSize = positiveInteger(env, 'OTEL_BSP_MAX_EXPORT_BATCH_SIZE');
  const scheduledDelayMillis = positiveInteger(env, 'OTEL_BSP_SCHEDULE_DELAY');
  const exportTimeoutMillis = positiveInteger(env, 'OTEL_BSP_EXPORT_TIMEOUT');
  const processor = new BatchSpanProcessor({
    exporter,
    ...(maxQueueSize === undefined ? {} : { maxQueueSize }),
    ...(maxExportBatchSize === undefined ? {} : { maxExportBatchSize }),
    ...(scheduledDelayMillis === undefined ? {} : { scheduledDelayMillis }),
    ...(exportTimeoutMillis === undefined ? {} : { exportTimeoutMillis }),
  });
  const resource = defaultResource()
    .merge(resourceFromAttributes({ [ATTR_SERVICE_NAME]: 'bookstore-inventory' }))
    .merge(detectResources({ detectors: [envDetector] }));
  const provider = new TracerProvider({ resource, sampler, spanProcessors: [processor] });

  context.setGlobalContextManager(new AsyncLocalStorageContextManager().enable());
  propagation.setGlobalPropagator(new W3CTraceContextPropagator());
  trace.setGlobalTracerProvider(provider);

  const endpoint =
    value(env, 'OTEL_EXPORTER_OTLP_TRACES_ENDPOINT') ??
    `${value(env, 'OTEL_EXPORTER_OTLP_ENDPOINT') ?? 'http://localhost:4318'} (+ /v1/traces)`;
  const serviceName = String(resource.attributes[ATTR_SERVICE_NAME]);
  return {
    description: `tracing: spans of ${serviceName} go to ${endpoint} as OTLP/HTTP JSON, sampler ${sampler.toString()}`,
    async shutdown() {
      // Flushes the spans still batched, then stops: a stopped service leaves no trace half sent.
      await provider.shutdown();
      trace.disable();
      context.disable();
      propagation.disable();
    },
  };
}
