//! The export file: Parquet through the `parquet` crate's column writers (no arrow), Snappy
//! compressed, written to a temporary file in the output directory, flushed to disk, then
//! renamed into place: a reader never sees a half-written file.

use super::HourRow;
use anyhow::Context;
use parquet::basic::Compression;
use parquet::data_type::Int64Type;
use parquet::file::properties::WriterProperties;
use parquet::file::writer::SerializedFileWriter;
use parquet::schema::parser::parse_message_type;
use std::fs::File;
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// The file's schema: every column required, all 64-bit integers; `post_id` unsigned and
/// `hour` a UTC timestamp in milliseconds.
const SCHEMA: &str = "
message likewise_analytics {
    required int64 post_id (INTEGER(64,false));
    required int64 hour (TIMESTAMP(MILLIS,true));
    required int64 likes;
    required int64 unlikes;
    required int64 comments;
    required int64 comments_visible_delta;
    required int64 comment_likes;
    required int64 comment_unlikes;
    required int64 unique_viewers;
}";

/// Rows per row group (each is built in memory, a column at a time).
const ROW_GROUP: usize = 1 << 20;

/// The value of column `c` (schema order) of a row.
fn column(c: usize, r: &HourRow) -> i64 {
    match c {
        // Unsigned 64-bit in a signed physical column: the same bits.
        0 => r.post as i64,
        1 => r.hour_ms as i64,
        2 => r.likes,
        3 => r.unlikes,
        4 => r.comments,
        5 => r.comments_visible_delta,
        6 => r.comment_likes,
        7 => r.comment_unlikes,
        _ => r.unique_viewers,
    }
}

/// Write `rows` (sorted by hour, then post) to `dir/name` atomically; returns the path.
pub fn write(dir: &Path, name: &str, rows: &[HourRow]) -> anyhow::Result<PathBuf> {
    std::fs::create_dir_all(dir)
        .with_context(|| format!("cannot create the output directory {}", dir.display()))?;
    let path = dir.join(name);
    let tmp = dir.join(format!(".{name}.tmp-{}", std::process::id()));
    let result = write_file(&tmp, rows).and_then(|()| {
        std::fs::rename(&tmp, &path)
            .with_context(|| format!("renaming {} to {}", tmp.display(), path.display()))
    });
    if let Err(e) = result {
        let _ = std::fs::remove_file(&tmp);
        return Err(e);
    }
    // Make the rename itself durable.
    if let Ok(d) = File::open(dir) {
        let _ = d.sync_all();
    }
    Ok(path)
}

fn write_file(tmp: &Path, rows: &[HourRow]) -> anyhow::Result<()> {
    let file = File::create(tmp)
        .with_context(|| format!("cannot write to the output directory ({})", tmp.display()))?;
    let handle = file.try_clone().context("duplicating the file handle")?;
    let schema = Arc::new(parse_message_type(SCHEMA).context("the export schema")?);
    let props = Arc::new(
        WriterProperties::builder()
            .set_compression(Compression::SNAPPY)
            .set_created_by(format!("likewise {}", env!("CARGO_PKG_VERSION")))
            .build(),
    );
    let mut writer = SerializedFileWriter::new(file, schema, props).context("starting the Parquet file")?;
    for group in rows.chunks(ROW_GROUP) {
        let mut rg = writer.next_row_group().context("starting a row group")?;
        let mut c = 0;
        while let Some(mut col) = rg.next_column().context("next column")? {
            let values: Vec<i64> = group.iter().map(|r| column(c, r)).collect();
            col.typed::<Int64Type>().write_batch(&values, None, None).context("writing a column")?;
            col.close().context("closing a column")?;
            c += 1;
        }
        rg.close().context("closing a row group")?;
    }
    writer.close().context("writing the Parquet footer")?;
    handle.sync_all().with_context(|| format!("flushing {} to disk", tmp.display()))?;
    Ok(())
}
