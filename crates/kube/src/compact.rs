//! A lean cache for Kubernetes objects: [`compact_cache`] keeps every object as compact JSON
//! in an [`informer_store::CompactStore`], decoded on read.

use std::marker::PhantomData;
use std::sync::Arc;

use informer_factory::CacheBuilder;
use informer_store::{BoxError, Codec, CompactStore, Indexer};
use serde::Serialize;
use serde::de::DeserializeOwned;

/// Objects at rest as compact JSON: the [`Codec`] of [`compact_cache`].
pub struct JsonCodec<K>(PhantomData<fn() -> K>);

impl<K> Default for JsonCodec<K> {
    fn default() -> Self {
        Self(PhantomData)
    }
}

impl<K> std::fmt::Debug for JsonCodec<K> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("JsonCodec")
    }
}

impl<K: Serialize + DeserializeOwned + 'static> Codec<K> for JsonCodec<K> {
    fn encode(&self, object: &K) -> Result<Vec<u8>, BoxError> {
        Ok(serde_json::to_vec(object)?)
    }

    fn decode(&self, bytes: &[u8]) -> Result<K, BoxError> {
        Ok(serde_json::from_str(std::str::from_utf8(bytes)?)?)
    }
}

/// A cache that holds its objects as compact JSON and keeps the `hot` written or read last
/// decoded: for [`InformerOptions::cache`](informer_factory::InformerOptions::cache), when
/// memory matters more than read time. A realistic pod (without its managed fields, the
/// factory's default) costs about 9 KB there against about 48 KB decoded; a read of an object
/// that is not hot decodes it (about 35 µs for that pod), so listing or an index lookup of many
/// objects costs a decode each. Handlers are not affected: they receive the decoded objects as
/// before.
///
/// ```no_run
/// use informer_factory::InformerOptions;
/// use informer_kube::{KubeInformerFactory, KubeSource, compact_cache};
/// use k8s_openapi::api::core::v1::Pod;
///
/// # async fn run() -> Result<(), Box<dyn std::error::Error>> {
/// let factory = KubeInformerFactory::new(KubeSource::try_default().await?);
/// let pods = factory.informer_with::<Pod>(
///     InformerOptions::new().cache("compact", compact_cache::<Pod>(1_000)),
/// );
/// # let _ = pods;
/// # Ok(()) }
/// ```
pub fn compact_cache<K>(hot: usize) -> CacheBuilder<K>
where
    K: Serialize + DeserializeOwned + Send + Sync + 'static,
{
    Arc::new(move |key_func, indexers| -> Arc<dyn Indexer<K>> {
        Arc::new(CompactStore::new(
            key_func,
            indexers,
            Arc::new(JsonCodec::<K>::default()),
            hot,
        ))
    })
}
