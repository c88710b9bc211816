use runledger::prelude::*;

#[job] async fn crawl(url: String) -> Result<String, JobError> { Ok(url) }
#[job] async fn classify(ctx: JobContext) -> Result<String, JobError> {
    ctx.output(Research::CRAWL).await
}
#[job] async fn score(ctx: JobContext) -> Result<u32, JobError> {
    Ok(ctx.output(Research::CRAWL).await?.len() as u32)
}
#[job] async fn persist(ctx: JobContext) -> Result<(String, u32, bool), JobError> {
    let label = ctx.output(Research::CLASSIFY).await?;
    let score = ctx.output(Research::SCORE).await?;
    let approved = ctx.output(Research::REVIEW).await?;
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
    #[after(review)]
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
