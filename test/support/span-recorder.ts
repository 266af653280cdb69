import { context, propagation, trace } from '@opentelemetry/api';
import { AsyncLocalStorageContextManager } from '@opentelemetry/context-async-hooks';
import { W3CTraceContextPropagator } from '@opentelemetry/core';
import { InMemorySpanExporter, SimpleSpanProcessor, TracerProvider, type ReadableSpan } from '@opentelemetry/sdk-trace';

/**
 * The process's tracing, as an application that registers OpenTelemetry has it (a context manager, the
 * W3C propagator, a tracer provider), with every finished span kept in memory for a test to read.
 */
export class SpanRecorder {
  private readonly exporter = new InMemorySpanExporter();
  private readonly provider = new TracerProvider({ spanProcessors: [new SimpleSpanProcessor({ exporter: this.exporter })] });

  /** Registers the recorder as the process's tracing; `stop()` undoes it. */
  start(): void {
    context.setGlobalContextManager(new AsyncLocalStorageContextManager().enable());
    propagation.setGlobalPropagator(new W3CTraceContextPropagator());
    trace.setGlobalTracerProvider(this.provider);
  }

  spans(): ReadableSpan[] {
    return this.exporter.getFinishedSpans();
  }

  async stop(): Promise<void> {
    await this.provider.shutdown();
    trace.disable();
    propagation.disable();
    context.disable();
  }
}
