//! `import`: a file or stdin into the work table, atomically, idempotently, and never over a
//! row another writer or an earlier import put there.

use std::io::Write as _;
use std::sync::Arc;
use std::time::{Duration, Instant};

use campaign_sender::exit;
use campaign_sender::import::{self, ImportError, ImportProgress, ImportReport};
use sqlx::PgPool;
use tokio::io::AsyncWriteExt;

use crate::helpers::*;

async fn import_text(
    pool: &PgPool,
    text: &str,
    rejects: Option<&std::path::Path>,
) -> Result<ImportReport, ImportError> {
    let opts = pool.connect_options().as_ref().clone();
    let input: Box<dyn std::io::Read + Send> = Box::new(std::io::Cursor::new(text.to_string()));
    let rejects: Option<Box<dyn std::io::Write + Send>> =
        rejects.map(|p| Box::new(std::fs::File::create(p).unwrap()) as Box<_>);
    let source = import::Source {
        input,
        delimiter: b',',
        allow_empty: false,
        stream: true,
    };
    import::import(
        &opts,
        CAMPAIGN,
        source,
        rejects,
        Arc::new(ImportProgress::default()),
    )
    .await
}

async fn rows(pool: &PgPool) -> Vec<(i64, Option<String>, String, i32)> {
    sqlx::query_as(
        "SELECT member_id, email, state, attempts FROM campaign_targets WHERE campaign_id = $1 ORDER BY member_id",
    )
    .bind(CAMPAIGN)
    .fetch_all(pool)
    .await
    .unwrap()
}

#[sqlx::test(migrator = "campaign_sender::store::MIGRATOR")]
async fn import_rejects_a_bad_file_atomically_naming_lines_but_never_addresses(pool: PgPool) {
    let path = temp_path("bad.csv");
    let mut f = std::fs::File::create(&path).unwrap();
    writeln!(f, "member_id,email").unwrap();
    for i in 1..=5000 {
        writeln!(f, "{i},m{i}@example.com").unwrap();
    }
    writeln!(f, "abc,secret.person@example.com").unwrap(); // line 5002
    writeln!(f, "5001,not-an-address").unwrap(); // line 5003
    writeln!(f, "17,again17@example.com").unwrap(); // line 5004: repeats line 18
    drop(f);
    let db = operator_url(&pool).await;
    let child = spawn_sender(
        &["import", "--campaign", CAMPAIGN, path.to_str().unwrap()],
        &db,
        &[],
    );
    let (code, out, err) = finish(child, Duration::from_secs(60)).await;
    assert_eq!(code, exit::Exit::DataError as i32, "{out}\n{err}");
    for line in ["line 5002", "line 5003", "line 5004", "repeats line 18"] {
        assert!(err.contains(line), "stderr does not name {line:?}: {err}");
    }
    assert!(
        !err.contains('@') && !out.contains('@'),
        "an address was printed: {err}"
    );
    assert!(err.contains("nothing was imported"), "{err}");
    // Atomic: not even the 5000 good lines.
    assert!(rows(&pool).await.is_empty());
}

#[sqlx::test(migrator = "campaign_sender::store::MIGRATOR")]
async fn importing_the_same_file_twice_changes_nothing_and_never_resets_a_sent_row(pool: PgPool) {
    let text: String = (1..=1000)
        .map(|i| format!("{i},m{i}@example.com\n"))
        .collect();
    let first = import_text(&pool, &text, None).await.unwrap();
    assert_eq!(
        (first.records, first.inserted, first.already_present),
        (1000, 1000, 0)
    );
    // The campaign moves on: some rows sent, one failed, one claimed by a worker.
    sqlx::query("UPDATE campaign_targets SET state = 'sent', attempts = 1, sent_at = now() WHERE member_id <= 300")
        .execute(&pool)
        .await
        .unwrap();
    sqlx::query("UPDATE campaign_targets SET state = 'failed', attempts = 3, last_status = 422, last_error = 'rejected' WHERE member_id = 500")
        .execute(&pool)
        .await
        .unwrap();
    sqlx::query("UPDATE campaign_targets SET state = 'sending', claim_id = gen_random_uuid(), lease_until = now() + interval '1 minute' WHERE member_id = 600")
        .execute(&pool)
        .await
        .unwrap();
    let before = rows(&pool).await;
    // The same file again, with one changed address and no header this time.
    let again = text.replace("7,m7@example.com\n", "7,changed7@example.com\n");
    let second = import_text(&pool, &again, None).await.unwrap();
    assert_eq!(
        (
            second.records,
            second.inserted,
            second.already_present,
            second.changed_email
        ),
        (1000, 0, 1000, 1)
    );
    assert_eq!(rows(&pool).await, before, "a re-import changed rows");
}

#[sqlx::test(migrator = "campaign_sender::store::MIGRATOR")]
async fn a_member_inserted_by_another_writer_during_an_import_is_left_to_it(pool: PgPool) {
    // Another system inserts member 500 and has not committed when the import reaches it.
    let mut other = pool.begin().await.unwrap();
    sqlx::query("INSERT INTO campaign_targets (campaign_id, member_id, email) VALUES ($1, 500, 'other@example.com')")
        .bind(CAMPAIGN)
        .execute(&mut *other)
        .await
        .unwrap();
    let text: String = (1..=1000)
        .map(|i| format!("{i},m{i}@example.com\n"))
        .collect();
    let import = {
        let pool = pool.clone();
        tokio::spawn(async move { import_text(&pool, &text, None).await })
    };
    // Wait until the import waits on that row's lock, then commit the other writer.
    let t0 = Instant::now();
    loop {
        let waiting: i64 = sqlx::query_scalar(
            "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND query LIKE '%INSERT INTO campaign_targets%'",
        )
        .fetch_one(&pool)
        .await
        .unwrap();
        if waiting > 0 {
            break;
        }
        assert!(
            t0.elapsed() < Duration::from_secs(20),
            "the import never waited"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    other.commit().await.unwrap();
    let r = import
        .await
        .unwrap()
        .expect("the import failed on a concurrent insert");
    assert_eq!((r.inserted, r.already_present), (999, 1), "{r:?}");
    let all = rows(&pool).await;
    assert_eq!(all.len(), 1000);
    assert_eq!(all[499].1.as_deref(), Some("other@example.com"));
}

#[sqlx::test(migrator = "campaign_sender::store::MIGRATOR")]
async fn skip_invalid_writes_the_rejects_aside_and_imports_the_rest(pool: PgPool) {
    let rejects = temp_path("rejects.csv");
    let text = "email,member_id,source\n\
                a1@example.com,1,crm\n\
                \n\
                a2@example.com,2,crm\n\
                broken,3,crm\n\
                a4@example.com,x4,crm\n\
                second1@example.com,1,crm\n\
                a5@example.com,5,crm\n";
    let r = import_text(&pool, text, Some(&rejects)).await.unwrap();
    assert_eq!(
        (r.records, r.invalid, r.duplicates, r.inserted),
        (6, 2, 1, 3),
        "{r:?}"
    );
    let ids: Vec<i64> = rows(&pool).await.iter().map(|r| r.0).collect();
    assert_eq!(ids, vec![1, 2, 5]);
    // The first line of a repeated member wins.
    assert_eq!(rows(&pool).await[0].1.as_deref(), Some("a1@example.com"));
    let mut rdr = csv::Reader::from_path(&rejects).unwrap();
    assert_eq!(
        rdr.headers().unwrap(),
        vec!["member_id", "email", "line", "reason"]
    );
    let lines: Vec<String> = rdr
        .records()
        .map(|r| r.unwrap().get(2).unwrap().to_string())
        .collect();
    assert_eq!(lines, vec!["5", "6", "7"]);
    // The rejects file, fixed, is valid input as it is (columns found by header name).
    let fixed = std::fs::read_to_string(&rejects)
        .unwrap()
        .replace("broken", "fixed3@example.com")
        .replace("x4", "4");
    let fixed: String = fixed
        .lines()
        .filter(|l| !l.starts_with("1,"))
        .map(|l| format!("{l}\n"))
        .collect();
    let r = import_text(&pool, &fixed, None).await.unwrap();
    assert_eq!(r.inserted, 2, "{r:?}");
}

/// `import --campaign CAMPAIGN -` as the operator role, its standard input a pipe to write to.
fn import_from_stdin(db: &str) -> tokio::process::Child {
    let mut cmd = tokio::process::Command::new(env!("CARGO_BIN_EXE_campaign-sender"));
    cmd.args(["import", "--campaign", CAMPAIGN, "-"])
        .env_clear()
        .env("DATABASE_URL", db)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .kill_on_drop(true);
    cmd.spawn().unwrap()
}

/// Ctrl-C (or SIGTERM) during an import rolls it back and exits 128 + the signal, even when
/// the input then ends (the producer of a pipe dies with the same Ctrl-C).
#[sqlx::test(migrator = "campaign_sender::store::MIGRATOR")]
async fn an_interrupted_import_imports_nothing_and_says_so(pool: PgPool) {
    let db = operator_url(&pool).await;
    for (signal, code_wanted) in [("-INT", 130), ("-TERM", 143)] {
        let mut child = import_from_stdin(&db);
        let mut stdin = child.stdin.take().unwrap();
        let body: String = (1..=5_000)
            .map(|i| format!("{i},m{i}@example.com\n"))
            .collect();
        stdin.write_all(body.as_bytes()).await.unwrap();
        stdin.flush().await.unwrap();
        // Read and staged: the rows are in the transaction, waiting for the end of input.
        tokio::time::sleep(Duration::from_millis(1500)).await;
        let pid = child.id().unwrap().to_string();
        std::process::Command::new("kill")
            .args([signal, &pid])
            .status()
            .unwrap();
        drop(stdin); // the producer is gone too: end of input
        let (code, out, err) = finish(child, Duration::from_secs(60)).await;
        assert_eq!(code, code_wanted, "{signal}: {out}\n{err}");
        assert!(err.contains("nothing was imported"), "{err}");
        let rows: i64 = sqlx::query_scalar("SELECT count(*) FROM campaign_targets")
            .fetch_one(&pool)
            .await
            .unwrap();
        assert_eq!(rows, 0, "{signal}: a partial import was committed");
    }
}

#[sqlx::test(migrator = "campaign_sender::store::MIGRATOR")]
async fn import_reads_stdin_and_reports_what_it_did(pool: PgPool) {
    let db = operator_url(&pool).await;
    let mut child = import_from_stdin(&db);
    let mut stdin = child.stdin.take().unwrap();
    let body: String = (1..=20_000)
        .map(|i| format!("{i},m{i}@example.com\n"))
        .collect();
    stdin.write_all(body.as_bytes()).await.unwrap();
    drop(stdin);
    let (code, out, err) = finish(child, Duration::from_secs(60)).await;
    assert_eq!(code, 0, "{out}\n{err}");
    assert!(out.contains("20000 imported as pending"), "{out}");
    assert_eq!(states(&pool).await.get("pending"), Some(&20_000));
}

#[sqlx::test(migrator = "campaign_sender::store::MIGRATOR")]
async fn import_of_a_missing_file_gives_66(pool: PgPool) {
    let db = operator_url(&pool).await;
    let child = spawn_sender(
        &["import", "--campaign", CAMPAIGN, "/nonexistent/members.csv"],
        &db,
        &[],
    );
    let (code, _, err) = finish(child, Duration::from_secs(30)).await;
    assert_eq!(code, exit::Exit::NoInput as i32, "{err}");
}

/// What PostgreSQL's text cannot hold is the file's fault, said by line: a NUL byte in a
/// template-data column, and input that is not UTF-8 at all (not taken for an empty file),
/// each exit 65 naming the line, nothing imported.
#[sqlx::test(migrator = "campaign_sender::store::MIGRATOR")]
async fn a_nul_byte_or_input_that_is_not_utf8_is_refused_by_line_as_the_files_fault(pool: PgPool) {
    let db = operator_url(&pool).await;
    for (body, line, what) in [
        (
            b"member_id,email,first_name\n1,a@example.com,Ann\n2,b@example.com,B\0b\n".to_vec(),
            "line 3",
            "NUL byte",
        ),
        (
            b"1,a@example.com\n2,\xff\xfe@example.com\n".to_vec(),
            "line 2",
            "not valid UTF-8",
        ),
        (b"\xff\xfe\xfd\n".to_vec(), "line 1", "not valid UTF-8"),
    ] {
        let mut child = import_from_stdin(&db);
        let mut stdin = child.stdin.take().unwrap();
        stdin.write_all(&body).await.unwrap();
        drop(stdin);
        let (code, out, err) = finish(child, Duration::from_secs(60)).await;
        assert_eq!(code, exit::Exit::DataError as i32, "{what}: {out}\n{err}");
        assert!(err.contains(line) && err.contains(what), "{what}: {err}");
        assert!(
            states(&pool).await.is_empty(),
            "{what}: something was imported"
        );
    }
}
