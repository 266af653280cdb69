import { sql } from 'kysely';
import { Type } from 'typebox';
import type { TransactionalKind } from 'bookstore-inventory/inbox';
import type { Transaction } from 'kysely';
import { isMysql, type Database } from './schema.js';

/** A payment event: the payment provider's id for the payment, the account to credit, the amount. */
export const PaymentReceived = Type.Object(
  {
    paymentId: Type.String({ minLength: 1, maxLength: 100 }),
    accountId: Type.String({ pattern: '^[A-Za-z0-9_-]{1,100}$', description: 'Case-insensitive' }),
    amountCents: Type.Integer({ minimum: 1, maximum: 1_000_000_000 }),
  },
  { additionalProperties: false },
);

/** Credited (with the balance after it), or already credited by an earlier message carrying the same payment. */
export const CreditOutcome = Type.Union([
  Type.Object({ result: Type.Literal('credited'), paymentId: Type.String(), accountId: Type.String(), balanceCents: Type.Number() }),
  Type.Object({ result: Type.Literal('already-credited'), paymentId: Type.String(), creditedBy: Type.String() }),
]);

/**
 * Credits an account once per message (the inbox) and once per payment (the credits table's key): a
 * producer that sends the same payment under a new message id gets 'already-credited' and no money.
 */
export const creditAccount: TransactionalKind<typeof PaymentReceived, typeof CreditOutcome, Database> = {
  kind: 'transaction',
  consumer: 'payments.credit-account',
  name: 'PaymentReceived',
  data: PaymentReceived,
  outcome: CreditOutcome,
  normalize: (d) => ({ paymentId: d.paymentId, accountId: d.accountId.toLowerCase(), amountCents: d.amountCents }),
  run: async (trx, { data: { paymentId, accountId, amountCents }, key }, now) => {
    const credit = { payment_id: paymentId, account_id: accountId, amount_cents: amountCents, message_id: key.messageId, credited_at: now };
    const credited = isMysql(trx) ? await creditOnMysql(trx, credit) : await creditOnPostgres(trx, credit);
    if (credited === undefined) {
      const earlier = await trx.selectFrom('credits').select('message_id').where('payment_id', '=', paymentId).executeTakeFirstOrThrow();
      return { result: 'already-credited', paymentId, creditedBy: earlier.message_id };
    }
    return { result: 'credited', paymentId, accountId, balanceCents: credited };
  },
};

interface Credit {
  payment_id: string;
  account_id: string;
  amount_cents: number;
  message_id: string;
  credited_at: Date;
}

/** Records the credit and adds it to the balance; the new balance, or undefined when the payment was credited before. */
async function creditOnPostgres(trx: Transaction<Database>, credit: Credit): Promise<number | undefined> {
  const inserted = await trx
    .insertInto('credits')
    .values(credit)
    .onConflict((c) => c.column('payment_id').doNothing())
    .returning('payment_id')
    .executeTakeFirst();
  if (inserted === undefined) return undefined;
  const account = await trx
    .insertInto('accounts')
    .values({ account_id: credit.account_id, balance_cents: credit.amount_cents })
    .onConflict((c) => c.column('account_id').doUpdateSet({ balance_cents: sql<number>`accounts.balance_cents + ${credit.amount_cents}` }))
    .returning('balance_cents')
    .executeTakeFirstOrThrow();
  return Number(account.balance_cents);
}

/**
 * The same on MariaDB/MySQL, which have no ON CONFLICT and (MySQL) no RETURNING: the credit is an
 * insert that does nothing on the payment id's duplicate key, the balance an upsert read back in the
 * same transaction, where the upsert's row lock keeps it.
 */
async function creditOnMysql(trx: Transaction<Database>, credit: Credit): Promise<number | undefined> {
  // INSERT IGNORE: a duplicate payment id inserts nothing and counts 0 rows (the schema has bounded the values).
  const inserted = await trx.insertInto('credits').orIgnore().values(credit).executeTakeFirst();
  if (Number(inserted.numInsertedOrUpdatedRows ?? 0) !== 1) return undefined;
  await trx
    .insertInto('accounts')
    .values({ account_id: credit.account_id, balance_cents: credit.amount_cents })
    .onDuplicateKeyUpdate({ balance_cents: sql<number>`balance_cents + ${credit.amount_cents}` })
    .execute();
  const account = await trx
    .selectFrom('accounts')
    .select('balance_cents')
    .where('account_id', '=', credit.account_id)
    .executeTakeFirstOrThrow();
  return Number(account.balance_cents);
}
