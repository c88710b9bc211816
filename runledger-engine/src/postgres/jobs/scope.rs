//! Tenant scopes: which organization's jobs and runs a caller may read or act on.

use uuid::Uuid;

/// Which rows a caller may see or act on. Every read and operator action addressed by a job or
/// run id takes one, and a row outside the scope is reported exactly like a missing one, so a
/// tenant cannot even learn that another tenant's id exists.
///
/// ```
/// use runledger_engine::postgres::jobs::TenantScope;
///
/// let tenant = uuid::Uuid::now_v7();
/// let scope = TenantScope::from_organization(Some(tenant));
/// assert_eq!(scope, TenantScope::Organization(tenant));
/// assert_eq!(TenantScope::from_organization(None), TenantScope::Global);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TenantScope {
    /// Rows of this organization only.
    Organization(Uuid),
    /// Rows without an organization only.
    Global,
    /// Every row (trusted operator surfaces such as the TUI without `--org`).
    Admin,
}

impl TenantScope {
    /// The scope of rows owned by `organization_id` (`None`: rows without organization).
    pub fn from_organization(organization_id: Option<Uuid>) -> Self {
        match organization_id {
            Some(org) => Self::Organization(org),
            None => Self::Global,
        }
    }

    /// (scoped?, organization) as the SQL statements take them:
    /// `NOT $scoped OR organization_id IS NOT DISTINCT FROM $org`.
    pub(crate) fn sql(self) -> (bool, Option<Uuid>) {
        match self {
            Self::Organization(org) => (true, Some(org)),
            Self::Global => (true, None),
            Self::Admin => (false, None),
        }
    }

    /// Whether a row owned by `organization_id` is inside the scope.
    pub(crate) fn admits(self, organization_id: Option<Uuid>) -> bool {
        match self {
            Self::Organization(org) => organization_id == Some(org),
            Self::Global => organization_id.is_none(),
            Self::Admin => true,
        }
    }
}
