-- The vendors' own lists do not undo whose fault a refusal was: SES's account suppression list,
-- SendGrid's bounces, Postmark's deactivation and Mailgun's bounces list an address after any
-- hard bounce, ours included, and the next campaign's drop would then list it in ours. Every
-- address refused for our own domain's fault (events::cause, the sender's) is kept here, in
-- every form (crate::fold::listings); a vendor's drop of such an address lists nobody
-- (src/store/events.rs), nor does Postmark's inactive recipient at send (the finish).
-- Personal data like `suppressions`: an erasure deletes the address here too.
CREATE TABLE IF NOT EXISTS sender_refused (
    email      text        PRIMARY KEY CHECK (email = email_fold(email) AND email <> ''),
    family     text        NOT NULL,
    cause      text        NOT NULL,
    refused_at timestamptz NOT NULL DEFAULT now()
);
