import { randomBytes } from 'node:crypto';
import { isValidProducerId, PRODUCER_ID_PATTERN } from '../src/inbox/message-key.js';
import { apiKeyDigest } from '../src/producer-config.js';

/**
 * Makes an API key for a producer: 32 random bytes (base64url), and the PRODUCER_API_KEYS entry
 * that holds only its SHA-256 digest. The key goes to the producer; the entry into the service's
 * environment (or the digest into PRODUCERS_FILE).
 *   npm run producer:key -- orders
 */
const id = process.argv[2] ?? '';
if (!isValidProducerId(id)) {
  console.error(`usage: npm run producer:key -- <producer id>   (the id must match ${PRODUCER_ID_PATTERN})`);
  process.exit(2);
}
const key = randomBytes(32).toString('base64url');
console.log(`API key for ${id} (give it to the producer; the service never stores it): ${key}`);
console.log(`PRODUCER_API_KEYS entry: ${id}:sha256:${apiKeyDigest(key)}`);
