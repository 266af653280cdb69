import { createHash } from 'node:crypto';
import { readFileSync } from 'node:fs';
import { Webhook } from 'standardwebhooks';
import { isValidProducerId, PRODUCER_ID_PATTERN } from './inbox/machinery.js';

/**
 * Producer credentials from the environment and from a file, validated: who may send commands.
 * Each producer has an id (its part of every inbox key it records), API keys (stored as SHA-256 digests
 * only) and/or Standard Webhooks secrets (held as given: an HMAC needs the secret itself). Several entries
 * for one producer are all valid at once: that is how a credential is rotated.
 */

export interface ProducerConfig {
  readonly id: string;
  /** SHA-256 digests (hex) of the API keys this producer sends as `Authorization: Bearer <key>`. */
  readonly apiKeySha256: readonly string[];
  /** Standard Webhooks secrets (`whsec_…`) this producer signs deliveries with. */
  readonly webhookSecrets: readonly string[];
  /** Commands per rate-limit window for this producer; undefined: RATE_LIMIT_MAX. */
  readonly rateLimitMax: number | undefined;
}

/** Thrown with a message naming the setting; config.ts turns it into a ConfigError. */
export class ProducerConfigError extends Error {
  override readonly name = 'ProducerConfigError';
}

const WEBHOOK_SECRET_PATTERN = /^whsec_[A-Za-z0-9+/=]{8,}$/;

/** True for a Standard Webhooks secret the verifier accepts: "whsec_" and well-formed base64. */
export function isWebhookSecret(value: string): boolean {
  if (!WEBHOOK_SECRET_PATTERN.test(value)) return false;
  try {
    new Webhook(value);
    return true;
  } catch {
    return false;
  }
}
const DIGEST = /^sha256:([0-9a-f]{64})$/;

/** The SHA-256 digest (hex) an API key is stored and compared as. */
export function apiKeyDigest(key: string): string {
  return createHash('sha256').update(key, 'utf8').digest('hex');
}

interface Draft {
  apiKeySha256: string[];
  webhookSecrets: string[];
  rateLimitMax: number | undefined;
}

function draftOf(drafts: Map<string, Draft>, id: string, setting: string): Draft {
  if (!isValidProducerId(id)) {
    throw new ProducerConfigError(
      `${setting}: producer id "${id}" must match ${PRODUCER_ID_PATTERN} (lower case, digits, . _ -; at most 32)`,
    );
  }
  let draft = drafts.get(id);
  if (draft === undefined) {
    draft = { apiKeySha256: [], webhookSecrets: [], rateLimitMax: undefined };
    drafts.set(id, draft);
  }
  return draft;
}

function addApiKey(draft: Draft, value: string, setting: string): void {
  const match = DIGEST.exec(value);
  if (match === null) {
    throw new ProducerConfigError(
      `${setting}: an API key is given as its digest, "sha256:" + 64 lower-case hex digits (npm run producer:key makes a key and its digest)`,
    );
  }
  draft.apiKeySha256.push(match[1]!);
}

function addWebhookSecret(draft: Draft, value: string, setting: string): void {
  if (!isWebhookSecret(value)) {
    throw new ProducerConfigError(`${setting}: a webhook secret must be a Standard Webhooks secret: "whsec_" followed by base64`);
  }
  draft.webhookSecrets.push(value);
}

/** `id:credential` entries separated by commas or white space. */
function entries(raw: string | undefined, setting: string): [string, string][] {
  if (raw === undefined) return [];
  return raw
    .split(/[\s,]+/)
    .filter((entry) => entry !== '')
    .map((entry) => {
      const at = entry.indexOf(':');
      if (at <= 0) throw new ProducerConfigError(`${setting}: each entry is <producer>:<credential>, got "${entry.slice(0, 12)}…"`);
      return [entry.slice(0, at), entry.slice(at + 1)];
    });
}

function isObject(value: unknown): value is Record<string, unknown> {
  return typeof value === 'object' && value !== null && !Array.isArray(value);
}

function stringList(value: unknown, where: string): string[] {
  if (value === undefined) return [];
  if (!Array.isArray(value) || !value.every((item) => typeof item === 'string')) {
    throw new ProducerConfigError(`${where} must be an array of strings`);
  }
  return value;
}

/**
 * PRODUCERS_FILE: `{ "producers": { "<id>": { "apiKeys": ["sha256:…"], "webhookSecrets": ["whsec_…"],
 * "rateLimitMax": 100 } } }`.
 */
function readFile(path: string, drafts: Map<string, Draft>): void {
  const setting = `PRODUCERS_FILE (${path})`;
  let document: unknown;
  try {
    document = JSON.parse(readFileSync(path, 'utf8'));
  } catch (error) {
    throw new ProducerConfigError(`${setting}: ${(error as Error).message}`);
  }
  if (!isObject(document) || !isObject(document.producers)) {
    throw new ProducerConfigError(`${setting}: expected { "producers": { "<id>": { "apiKeys": [...], "webhookSecrets": [...] } } }`);
  }
  for (const [id, entry] of Object.entries(document.producers)) {
    if (!isObject(entry)) throw new ProducerConfigError(`${setting}: producers.${id} must be an object`);
    const unknown = Object.keys(entry).filter((key) => !['apiKeys', 'webhookSecrets', 'rateLimitMax'].includes(key));
    if (unknown.length > 0) throw new ProducerConfigError(`${setting}: producers.${id} has unknown field "${unknown[0]}"`);
    const draft = draftOf(drafts, id, setting);
    for (const key of stringList(entry.apiKeys, `${setting}: producers.${id}.apiKeys`)) addApiKey(draft, key, setting);
    for (const secret of stringList(entry.webhookSecrets, `${setting}: producers.${id}.webhookSecrets`))
      addWebhookSecret(draft, secret, setting);
    if (entry.rateLimitMax !== undefined) {
      const max = entry.rateLimitMax;
      if (typeof max !== 'number' || !Number.isInteger(max) || max < 1 || max > 1_000_000) {
        throw new ProducerConfigError(`${setting}: producers.${id}.rateLimitMax must be a whole number from 1 to 1000000`);
      }
      draft.rateLimitMax = max;
    }
  }
}

/**
 * Every configured producer: PRODUCER_API_KEYS, PRODUCER_WEBHOOK_SECRETS and PRODUCERS_FILE together.
 * A credential that two producers share, or that is also the admin token, is refused: it would not say
 * who sent a command, or would make a producer an administrator.
 */
export function loadProducers(
  settings: { apiKeys: string | undefined; webhookSecrets: string | undefined; file: string | undefined },
  adminToken: string | undefined,
  webhookSecret: string | undefined,
): ProducerConfig[] {
  const drafts = new Map<string, Draft>();
  for (const [id, value] of entries(settings.apiKeys, 'PRODUCER_API_KEYS')) {
    addApiKey(draftOf(drafts, id, 'PRODUCER_API_KEYS'), value, 'PRODUCER_API_KEYS');
  }
  for (const [id, value] of entries(settings.webhookSecrets, 'PRODUCER_WEBHOOK_SECRETS')) {
    addWebhookSecret(draftOf(drafts, id, 'PRODUCER_WEBHOOK_SECRETS'), value, 'PRODUCER_WEBHOOK_SECRETS');
  }
  if (settings.file !== undefined) readFile(settings.file, drafts);

  const keyOwners = new Map<string, string>();
  const secretOwners = new Map<string, string>(webhookSecret === undefined ? [] : [[webhookSecret, 'WEBHOOK_SECRET']]);
  const adminDigest = adminToken === undefined ? undefined : apiKeyDigest(adminToken);
  const producers: ProducerConfig[] = [];
  for (const [id, draft] of drafts) {
    if (draft.apiKeySha256.length === 0 && draft.webhookSecrets.length === 0) {
      throw new ProducerConfigError(`producer "${id}" has no API key and no webhook secret`);
    }
    for (const digest of draft.apiKeySha256) {
      if (digest === adminDigest) throw new ProducerConfigError(`producer "${id}" has ADMIN_TOKEN as an API key: admin is a separate role`);
      const owner = keyOwners.get(digest);
      if (owner !== undefined && owner !== id) throw new ProducerConfigError(`producers "${owner}" and "${id}" share an API key`);
      keyOwners.set(digest, id);
    }
    for (const secret of draft.webhookSecrets) {
      const owner = secretOwners.get(secret);
      if (owner !== undefined && owner !== id) throw new ProducerConfigError(`producer "${id}" shares a webhook secret with ${owner}`);
      secretOwners.set(secret, id);
    }
    producers.push(
      Object.freeze({
        id,
        apiKeySha256: Object.freeze([...new Set(draft.apiKeySha256)]),
        webhookSecrets: Object.freeze([...new Set(draft.webhookSecrets)]),
        rateLimitMax: draft.rateLimitMax,
      }),
    );
  }
  return producers;
}

/** True for an address that only this machine can reach: 127.0.0.0/8, ::1, localhost. */
export function isLoopbackHost(host: string): boolean {
  const bare = host.replace(/^\[(.*)\]$/, '$1').toLowerCase();
  return bare === 'localhost' || bare === '::1' || /^127\.\d{1,3}\.\d{1,3}\.\d{1,3}$/.test(bare) || /^::ffff:127\./.test(bare);
}
