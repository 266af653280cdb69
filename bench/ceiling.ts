import Fastify from 'fastify';

/**
 * The HTTP ceiling: one POST route that parses the JSON body and answers 201 without touching a
 * database. Same framework, same load: what the service could reach if the database cost nothing.
 */
const app = Fastify({ logger: false });
app.get('/health/ready', async () => ({ status: 'ok' }));
app.post('/inventory/order-placed', async (request, reply) => {
  const body = request.body as { messageId?: string };
  return reply.code(201).send({ status: 'processed', messageId: body.messageId });
});
await app.listen({ port: Number(process.env.PORT ?? 3001), host: '127.0.0.1' });
for (const signal of ['SIGTERM', 'SIGINT'] as const) {
  process.once(signal, () => void app.close().then(() => process.exit(0)));
}
