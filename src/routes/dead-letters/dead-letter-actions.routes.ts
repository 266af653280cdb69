import type { TypeBoxTypeProvider } from '@fastify/type-provider-typebox';
import type { FastifyInstance } from 'fastify';
import { Type, type Static, type TObject } from 'typebox';
import {
  countDeadLettersOfGroup,
  deadLetterGroups,
  deadLetterIdsOfGroup,
  deadLettersByKey,
  deadLettersOfGroup,
  deleteDeadLetter,
  type GroupSelector,
} from '../../console/console.repository.js';
import { DeadLetterReplayer, type ReplayResult } from '../../console/replay.js';
import { type DeadLetter, findDeadLetter } from '../../inbox/machinery.js';
import { queuedCommands } from '../../commands.js';
import { adminGuard, adminSecurity } from '../../http/admin-guard.js';
import { jsonBodyOnly } from '../../http/body-parsers.js';
import type { AdminGuard } from '../route-options.js';
import { ADMIN_PROBLEMS, problemResponses, UNAVAILABLE_PROBLEMS, ProblemError, type ProblemSlug } from '../../http/problem.js';
import {
  GROUP_BATCH_DEFAULT,
  GROUP_BATCH_MAX,
  GroupBody,
  GroupProgress,
  GroupSchema,
  IdParams,
  ItemResult,
  LettersFound,
  GroupLettersQuery,
  ReplayResultSchema,
  SearchQuery,
} from './dead-letter-actions.schemas.js';

/**
 * Admin: dead letters grouped by cause, searched by key, replayed through the pipeline their queue
 * feeds, or discarded, one at a time or a group at a time (a bounded batch per request, which a
 * script or the console repeats until nothing is left: the throttle and the progress).
 */

/** Whether a letter or a group can be replayed, and if not why, as the API shows it. */
function replayability(whyNot: string | undefined) {
  return { replayable: whyNot === undefined, notReplayableBecause: whyNot ?? null };
}

/** Letters as a search answers with them, each saying whether it can be replayed. */
function lettersFound(letters: readonly DeadLetter[], replayer: DeadLetterReplayer) {
  return {
    items: letters.map((letter) => ({
      id: letter.id,
      consumer: letter.consumer,
      messageId: letter.messageId,
      keySource: letter.keySource,
      payload: letter.payload,
      reason: letter.reason,
      detail: letter.detail,
      receivedAt: letter.receivedAt.toISOString(),
      ...replayability(replayer.whyNot(letter)),
    })),
  };
}

type GroupRequest = Static<typeof GroupBody>;
type GroupItem = Static<typeof ItemResult>;

/**
 * A group request's batch: the group's next letters (oldest first, up to its throughId, at most its
 * limit), each handed to `act` in turn, and how many of the group are left. `act` says what became of a
 * letter, or undefined when the letter was gone meanwhile.
 */
async function groupBatch(app: FastifyInstance, body: GroupRequest, act: (id: string) => Promise<GroupItem | undefined>) {
  const { limit = GROUP_BATCH_DEFAULT, ...group } = body;
  const items: GroupItem[] = [];
  for (const id of await deadLetterIdsOfGroup(app.db, group, limit)) {
    const item = await act(id);
    if (item !== undefined) items.push(item);
  }
  return { done: items.length, remaining: await countDeadLettersOfGroup(app.db, group satisfies GroupSelector), items };
}

function replayToItem(id: string, result: ReplayResult): GroupItem {
  return result.result === 'dead-lettered'
    ? { id, result: result.result, reason: result.reason, detail: result.detail, deadLetter: result.deadLetter }
    : { id, result: result.result };
}

/** Admin: act on dead letters. */
export async function deadLetterActionRoutes(app: FastifyInstance): Promise<void> {
  const onRequest = adminGuard(app.config);
  // The commands the AMQP queues feed: the only pipeline a poison message came through.
  const replayer = new DeadLetterReplayer(
    app,
    queuedCommands(app.config).map((q) => q.command),
  );
  registerListGroups(app, onRequest, replayer);
  registerSearch(app, onRequest, replayer);
  registerListLettersOfGroup(app, onRequest, replayer);
  registerReplay(app, onRequest, replayer);
  registerDiscard(app, onRequest);
  registerReplayGroup(app, onRequest, replayer);
  registerDiscardGroup(app, onRequest);
}

/** The dead letter `id`; a 404 problem when it is gone. */
async function letterOr404(app: FastifyInstance, id: string): Promise<DeadLetter> {
  const letter = await findDeadLetter(app.db, id);
  if (letter === undefined) throw new ProblemError('not-found', { detail: `no dead letter ${id} (replayed or discarded already?)` });
  return letter;
}

/** GET /dead-letters/groups: dead letters by consumer and reason, with whether each group can be replayed. */
function registerListGroups(app: FastifyInstance, onRequest: AdminGuard, replayer: DeadLetterReplayer): void {
  const api = app.withTypeProvider<TypeBoxTypeProvider>();
  api.get(
    '/dead-letters/groups',
    {
      onRequest,
      schema: {
        operationId: 'listDeadLetterGroups',
        tags: ['dead-letters'],
        summary: 'Dead letters grouped by consumer and reason, largest group first',
        security: adminSecurity,
        response: {
          200: Type.Object({ items: Type.Array(GroupSchema) }, { additionalProperties: false, description: 'The dead-letter groups' }),
          ...problemResponses(...ADMIN_PROBLEMS),
        },
      },
    },
    async () => {
      const groups = await deadLetterGroups(app.db);
      return {
        items: groups.map((g) => ({
          ...g,
          oldest: g.oldest.toISOString(),
          newest: g.newest.toISOString(),
          ...replayability(replayer.whyNot({ consumer: g.consumer, reason: g.reason })),
        })),
      };
    },
  );
}

/** The route options of a GET answering with dead letters: the query says which. */
function lettersRoute<Q extends TObject>(onRequest: AdminGuard, route: { operationId: string; summary: string; querystring: Q }) {
  return {
    onRequest,
    schema: {
      operationId: route.operationId,
      tags: ['dead-letters'],
      summary: route.summary,
      security: adminSecurity,
      querystring: route.querystring,
      response: { 200: LettersFound, ...problemResponses('invalid-request', ...ADMIN_PROBLEMS) },
    },
  };
}

/** GET /dead-letters/search: the dead letters recorded under one key. */
function registerSearch(app: FastifyInstance, onRequest: AdminGuard, replayer: DeadLetterReplayer): void {
  const summary = 'Dead letters recorded under one key, newest first, each with its payload and whether it can be replayed';
  const route = lettersRoute(onRequest, { operationId: 'searchDeadLetters', summary, querystring: SearchQuery });
  app.withTypeProvider<TypeBoxTypeProvider>().get('/dead-letters/search', route, async (request) => {
    const { messageId, consumer } = request.query;
    return lettersFound(await deadLettersByKey(app.db, messageId, consumer, 100), replayer);
  });
}

/** GET /dead-letters/groups/letters: one group's letters, oldest first. */
function registerListLettersOfGroup(app: FastifyInstance, onRequest: AdminGuard, replayer: DeadLetterReplayer): void {
  const summary = "A group's letters, oldest first, each with its payload";
  const route = lettersRoute(onRequest, { operationId: 'listDeadLettersOfGroup', summary, querystring: GroupLettersQuery });
  app.withTypeProvider<TypeBoxTypeProvider>().get('/dead-letters/groups/letters', route, async (request) => {
    const { consumer, reason, limit = 50 } = request.query;
    return lettersFound(await deadLettersOfGroup(app.db, { consumer, reason }, limit), replayer);
  });
}

/** POST /dead-letters/{id}/replay: one letter run again through the pipeline its queue feeds. */
function registerReplay(app: FastifyInstance, onRequest: AdminGuard, replayer: DeadLetterReplayer): void {
  const api = app.withTypeProvider<TypeBoxTypeProvider>();
  api.post(
    '/dead-letters/:id/replay',
    {
      onRequest,
      schema: {
        operationId: 'replayDeadLetter',
        tags: ['dead-letters'],
        summary: 'Run a dead letter again through the pipeline its queue feeds, under its key',
        description:
          'For poison that a fix has since made valid. The payload is validated and run like a delivery from its queue. ' +
          'processed or duplicate: the letter is removed. The cause remains: the message is dead-lettered again with the cause as it ' +
          'is now (200, result dead-lettered, the new letter id). A key-reuse letter (422), and one whose kept bytes can only be ' +
          'refused again (malformed-json, payload-too-large, missing-message-key, invalid-message-key), cannot be replayed: ' +
          '409 not-replayable says why. A copy in flight, an overloaded service or a busy database answer as for a command (409/503): nothing changed. ' +
          'Replaying twice is harmless: the inbox answers the second as a duplicate, or the letter is gone (404).',
        security: adminSecurity,
        params: IdParams,
        response: {
          200: { ...ReplayResultSchema, description: 'What the replay did' },
          ...problemResponses('invalid-request', ...ADMIN_PROBLEMS, 'not-found', 'not-replayable', 'in-flight', ...UNAVAILABLE_PROBLEMS),
        },
      },
    },
    async (request) => replayer.replay(await letterOr404(app, request.params.id)),
  );
}

/** DELETE /dead-letters/{id}: one letter discarded, nothing run. */
function registerDiscard(app: FastifyInstance, onRequest: AdminGuard): void {
  const api = app.withTypeProvider<TypeBoxTypeProvider>();
  api.delete(
    '/dead-letters/:id',
    {
      onRequest,
      schema: {
        operationId: 'discardDeadLetter',
        tags: ['dead-letters'],
        summary: 'Discard a dead letter (nothing is run)',
        security: adminSecurity,
        params: IdParams,
        response: {
          200: Type.Object(
            { id: Type.String(), result: Type.Literal('discarded') },
            { additionalProperties: false, description: 'The letter is discarded' },
          ),
          ...problemResponses('invalid-request', ...ADMIN_PROBLEMS, 'not-found'),
        },
      },
    },
    async (request) => {
      const { id } = request.params;
      if (!(await deleteDeadLetter(app.db, id)))
        throw new ProblemError('not-found', { detail: `no dead letter ${id} (discarded already?)` });
      request.log.warn({ deadLetter: id }, 'dead letter discarded by an operator');
      return { id, result: 'discarded' as const };
    },
  );
}

/**
 * The route options of a request acting on the next letters of a group: a JSON body names the group and
 * the batch, the answer is the batch's progress. `problems` are those the action adds.
 */
function groupRoute(
  onRequest: AdminGuard,
  operation: { operationId: string; summary: string; description: string },
  ...problems: ProblemSlug[]
) {
  return {
    onRequest: [onRequest, jsonBodyOnly],
    schema: {
      operationId: operation.operationId,
      tags: ['dead-letters'],
      summary: operation.summary,
      description: operation.description,
      security: adminSecurity,
      body: GroupBody,
      response: {
        200: { ...GroupProgress, description: "The batch's progress" },
        ...problemResponses(
          'invalid-request',
          'malformed-json',
          ...ADMIN_PROBLEMS,
          'payload-too-large',
          'unsupported-media-type',
          ...problems,
        ),
      },
    },
  };
}

/** POST /dead-letters/groups/replay: the next letters of a group replayed one after the other. */
function registerReplayGroup(app: FastifyInstance, onRequest: AdminGuard, replayer: DeadLetterReplayer): void {
  const operation = {
    operationId: 'replayDeadLetterGroup',
    summary: 'Replay the next letters of a group, one after the other; repeat until remaining is 0',
    description:
      `Handles at most limit letters (up to ${GROUP_BATCH_MAX}) of the group, oldest first, up to throughId, one at a time ` +
      'so a group never floods the inbox; letters dead-lettered again get new ids above throughId and are not picked up again. ' +
      'A key-reuse group, and a group of letters that can only be refused again (malformed-json, payload-too-large, ' +
      'missing-message-key, invalid-message-key), answers 409 not-replayable. A copy in flight or a busy database stops the batch early with the error ' +
      '(409/503); what was done before stays done.',
  };
  const route = groupRoute(onRequest, operation, 'not-replayable', 'in-flight', ...UNAVAILABLE_PROBLEMS);
  app.withTypeProvider<TypeBoxTypeProvider>().post('/dead-letters/groups/replay', route, async (request) => {
    const whyNot = replayer.whyNot(request.body);
    if (whyNot !== undefined) throw new ProblemError('not-replayable', { detail: whyNot, consumer: request.body.consumer });
    return groupBatch(app, request.body, async (id) => {
      const letter = await findDeadLetter(app.db, id);
      return letter === undefined ? undefined : replayToItem(id, await replayer.replay(letter));
    });
  });
}

/** POST /dead-letters/groups/discard: the next letters of a group discarded. */
function registerDiscardGroup(app: FastifyInstance, onRequest: AdminGuard): void {
  const operation = {
    operationId: 'discardDeadLetterGroup',
    summary: 'Discard the next letters of a group; repeat until remaining is 0',
    description: `Removes at most limit letters (up to ${GROUP_BATCH_MAX}) of the group, oldest first, up to throughId. Nothing is run.`,
  };
  app.withTypeProvider<TypeBoxTypeProvider>().post('/dead-letters/groups/discard', groupRoute(onRequest, operation), async (request) => {
    const progress = await groupBatch(app, request.body, async (id) =>
      (await deleteDeadLetter(app.db, id)) ? { id, result: 'discarded' as const } : undefined,
    );
    const { consumer, reason, throughId } = request.body;
    if (progress.done > 0)
      request.log.warn({ consumer, reason, throughId, discarded: progress.done }, 'dead letters discarded by an operator');
    return progress;
  });
}
