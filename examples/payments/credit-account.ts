import { sql } from 'kysely';
import { Type } from 'typebox';
import type { TransactionalKind } from 'bookstore-inventory/inbox';
import type { Database } from './schema.js';

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
    const inserted = await trx
      .insertInto('credits')
      .values(credit)
      .onConflict((c) => c.column('payment_id').doNothing())
      .returning('payment_id')
      .executeTakeFirst();
    if (inserted === undefined) {
      const earlier = await trx.selectFrom('credits').select('message_id').where('payment_id', '=', paymentId).executeTakeFirstOrThrow();
      return { result: 'already-credited', paymentId, creditedBy: earlier.message_id };
    }
    const account = await trx
      .insertInto('accounts')
      .values({ account_id: accountId, balance_cents: amountCents })
      .onConflict((c) => c.column('account_id').doUpdateSet({ balance_cents: sql<number>`accounts.balance_cents + ${amountCents}` }))
      .returning('balance_cents')
      .executeTakeFirstOrThrow();
    return { result: 'credited', paymentId, accountId, balanceCents: Number(account.balance_cents) };
  },
};
