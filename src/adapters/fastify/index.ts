/**
 * The inbox's Fastify adapter: `app.register(inbox, { db })`, then `app.inbox.command(kind, { url })`.
 * See docs/inbox.md.
 */
export { inbox, type InboxDecoration, type InboxPluginOptions, type ObservedExecutor } from './plugin.js';
export {
  commandResult,
  commandSchema,
  readCommand,
  sendCommandResult,
  KEY_EXPIRES_HEADER,
  type CommandRouteOptions,
  type ReceivedCommand,
} from './command-endpoint.js';
export {
  CommandRequestError,
  defineProblems,
  INBOX_PROBLEMS,
  inboxProblem,
  inboxProblems,
  PROBLEM_MEDIA_TYPE,
  type ProblemCatalogue,
  type ProblemResponseOptions,
  type ProblemType,
  type InboxProblem,
  type InboxProblemSlug,
  type ProblemLinks,
} from './problems.js';
