import { context, SpanKind, SpanStatusCode, trace, type Context, type Span } from '@opentelemetry/api';
import {
  ATTR_HTTP_REQUEST_METHOD,
  ATTR_HTTP_RESPONSE_STATUS_CODE,
  ATTR_HTTP_ROUTE,
  ATTR_URL_PATH,
  ATTR_URL_SCHEME,
} from '@opentelemetry/semantic-conventions';
import type { FastifyInstance, FastifyRequest } from 'fastify';
import fp from 'fastify-plugin';
import { activeTracer, extractTraceContext } from '../inbox/tracing.js';

/** Each request's server span and the context it is active in. */
const spans = new WeakMap<FastifyRequest, { span: Span; context: Context }>();

/**
 * A server span per HTTP request, continuing the sender's W3C `traceparent`/`tracestate`, named and
 * attributed as the HTTP semantic conventions say (`POST /inventory/order-placed`, http.route,
 * http.response.status_code). Its context is made active again just before the handler (body parsing
 * runs in the socket's own context), so the inbox's claim span is its child. app.ts registers this only
 * when a tracer provider is registered: with tracing off, requests run no hook of it at all.
 */
export const httpTracing = fp(
  async (app: FastifyInstance) => {
    // Callback style throughout: the hooks hand `done` to context.with, so what follows runs in the span's context.
    app.addHook('onRequest', (request, _reply, done) => {
      const tracer = activeTracer();
      if (tracer === undefined) {
        done();
        return;
      }
      const parent = extractTraceContext(request.headers);
      const path = request.url.split('?')[0] ?? request.url;
      const attributes = { [ATTR_HTTP_REQUEST_METHOD]: request.method, [ATTR_URL_PATH]: path, [ATTR_URL_SCHEME]: request.protocol };
      const span = tracer.startSpan(request.method, { kind: SpanKind.SERVER, attributes }, parent);
      const active = trace.setSpan(parent, span);
      spans.set(request, { span, context: active });
      context.with(active, done);
    });
    app.addHook('preHandler', (request, _reply, done) => {
      const traced = spans.get(request);
      if (traced === undefined) done();
      else context.with(traced.context, done);
    });
    app.addHook('onResponse', (request, reply, done) => {
      const traced = spans.get(request);
      if (traced !== undefined) {
        const { span } = traced;
        const route = request.routeOptions.url;
        if (route !== undefined) {
          span.setAttribute(ATTR_HTTP_ROUTE, route);
          span.updateName(`${request.method} ${route}`);
        }
        span.setAttribute(ATTR_HTTP_RESPONSE_STATUS_CODE, reply.statusCode);
        // A 4xx is the client's: only a 5xx marks the server span as failed.
        if (reply.statusCode >= 500) span.setStatus({ code: SpanStatusCode.ERROR });
        span.end();
        spans.delete(request);
      }
      done();
    });
    app.addHook('onRequestAbort', (request, done) => {
      const traced = spans.get(request);
      if (traced !== undefined) {
        traced.span.setStatus({ code: SpanStatusCode.ERROR, message: 'request aborted by the client' });
        traced.span.end();
        spans.delete(request);
      }
      done();
    });
  },
  { name: 'http-tracing' },
);
