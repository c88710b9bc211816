use runledger::prelude::*;

struct Summary {
    words: usize,
}

#[job(name = "texts.summarize")]
async fn summarize(text: String) -> Result<Summary, JobError> {
    Ok(Summary { words: text.split_whitespace().count() })
}

fn main() {}
