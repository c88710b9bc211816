use runledger::prelude::*;

#[job] async fn crawl(url: String) -> Result<String, JobError> { Ok(url) }
#[job] async fn classify(#[output(Research::CRAWL)] page: String) -> Result<String, JobError> {
    Ok(page)
}
#[job] async fn score(#[output(Research::CRAWL)] page: String) -> Result<u32, JobError> {
    Ok(page.len() as u32)
}
#[job] async fn persist(
    #[output(Research::CLASSIFY)] label: String,
    #[output(Research::SCORE)] score: u32,
    #[output(Research::REVIEW)] approved: bool,
) -> Result<(String, u32, bool), JobError> {
    Ok((label, score, approved))
}

#[workflow(name = "profiles.research")]
struct Research {
    crawl: Crawl,
    #[after(crawl)]
    classify: Classify,
    #[after(crawl)]
    score: Score,
    #[after(classify, score)]
    review: External<bool>,
    // A step reads its direct prerequisites only: `persist` names all three it reads.
    #[after(classify, score, review)]
    #[result]
    persist: Persist,
}

fn main() {
    assert_eq!(Research::NAME, "profiles.research");
    assert_eq!(Research::RESULT_STEP, Some("persist"));
    let _typed: Step<Research, External<bool>> = Research::REVIEW;
    let _job: Step<Research, Persist> = Research::PERSIST;
    fn result_type<W: Workflow<Output = (String, u32, bool)>>() {}
    result_type::<Research>();
}
