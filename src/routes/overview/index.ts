/** The /overview route: what needs a person, and the figures behind it. */
export { overviewRoutes } from './overview.routes.js';
