//! Kubernetes objects read from a watch without their managed fields' field
//! sets (`metadata.managedFields[].fieldsV1`), and without those entries'
//! `time` and `fieldsType`.
//!
//! Every object the API server sends carries, per field manager, the set of
//! fields it owns as a JSON tree; for a Pod or a Deployment that tree is as
//! large as the rest of the object. The operator needs only who manages an
//! object (the apply step), never which fields, so [`Slim`] skips those trees
//! while the JSON is parsed instead of building them and dropping them: the
//! watches' most frequent allocation and about a tenth of the operator's CPU
//! at 1,000 services (BENCHMARKS.md). Everything else deserializes exactly as
//! `K` does, through `K`'s own `Deserialize`. Of each entry the manager, the
//! operation, the API version and the subresource stay (when an entry was
//! last written and the set's format are never read either).

use std::{borrow::Cow, fmt};

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::{Resource, runtime::watcher};
use serde::de::{
    self, DeserializeSeed, Deserializer, IgnoredAny, IntoDeserializer, MapAccess, SeqAccess,
    Visitor,
};

/// `K` as read from the API server, without `metadata.managedFields[]`'s
/// `fieldsV1`, `fieldsType` and `time`.
#[derive(Clone, Debug)]
pub struct Slim<K>(pub K);

impl<K: Resource> Resource for Slim<K> {
    type DynamicType = K::DynamicType;
    type Scope = K::Scope;

    fn kind(dt: &Self::DynamicType) -> Cow<'_, str> {
        K::kind(dt)
    }
    fn group(dt: &Self::DynamicType) -> Cow<'_, str> {
        K::group(dt)
    }
    fn version(dt: &Self::DynamicType) -> Cow<'_, str> {
        K::version(dt)
    }
    fn plural(dt: &Self::DynamicType) -> Cow<'_, str> {
        K::plural(dt)
    }
    fn meta(&self) -> &ObjectMeta {
        self.0.meta()
    }
    fn meta_mut(&mut self) -> &mut ObjectMeta {
        self.0.meta_mut()
    }
}

impl<'de, K: de::Deserialize<'de>> de::Deserialize<'de> for Slim<K> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        K::deserialize(Filter {
            inner: d,
            at: At::Object,
        })
        .map(Slim)
    }
}

/// Where in the object a value is: the filter only looks at the keys on the
/// path `metadata.managedFields[]`; every other value is handed to the inner
/// deserializer untouched.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum At {
    Object,
    Metadata,
    ManagedFields,
    Entry,
}

impl At {
    /// Where the value of `key` in a map at `self` is, if still on the path.
    fn child(self, key: &str) -> Option<At> {
        match (self, key) {
            (At::Object, "metadata") => Some(At::Metadata),
            (At::Metadata, "managedFields") => Some(At::ManagedFields),
            _ => None,
        }
    }

    fn skips(self, key: &str) -> bool {
        self == At::Entry && matches!(key, "fieldsV1" | "fieldsType" | "time")
    }
}

struct Filter<D> {
    inner: D,
    at: At,
}

struct FilterVisitor<V> {
    inner: V,
    at: At,
}

struct FilterSeed<S> {
    inner: S,
    at: At,
}

struct FilterMap<A> {
    inner: A,
    at: At,
    /// Where the value of the key just read is, if on the path.
    next: Option<At>,
}

struct FilterSeq<A> {
    inner: A,
    at: At,
}

macro_rules! forward {
    ($($method:ident),*) => {
        $(fn $method<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Self::Error> {
            self.inner.$method(FilterVisitor { inner: visitor, at: self.at })
        })*
    };
}

impl<'de, D: Deserializer<'de>> Deserializer<'de> for Filter<D> {
    type Error = D::Error;

    forward!(
        deserialize_any,
        deserialize_bool,
        deserialize_i8,
        deserialize_i16,
        deserialize_i32,
        deserialize_i64,
        deserialize_i128,
        deserialize_u8,
        deserialize_u16,
        deserialize_u32,
        deserialize_u64,
        deserialize_u128,
        deserialize_f32,
        deserialize_f64,
        deserialize_char,
        deserialize_str,
        deserialize_string,
        deserialize_bytes,
        deserialize_byte_buf,
        deserialize_option,
        deserialize_unit,
        deserialize_seq,
        deserialize_map,
        deserialize_identifier,
        deserialize_ignored_any
    );

    fn deserialize_unit_struct<V: Visitor<'de>>(
        self,
        name: &'static str,
        visitor: V,
    ) -> Result<V::Value, Self::Error> {
        let at = self.at;
        self.inner
            .deserialize_unit_struct(name, FilterVisitor { inner: visitor, at })
    }

    fn deserialize_newtype_struct<V: Visitor<'de>>(
        self,
        name: &'static str,
        visitor: V,
    ) -> Result<V::Value, Self::Error> {
        let at = self.at;
        self.inner
            .deserialize_newtype_struct(name, FilterVisitor { inner: visitor, at })
    }

    fn deserialize_tuple<V: Visitor<'de>>(
        self,
        len: usize,
        visitor: V,
    ) -> Result<V::Value, Self::Error> {
        let at = self.at;
        self.inner
            .deserialize_tuple(len, FilterVisitor { inner: visitor, at })
    }

    fn deserialize_tuple_struct<V: Visitor<'de>>(
        self,
        name: &'static str,
        len: usize,
        visitor: V,
    ) -> Result<V::Value, Self::Error> {
        let at = self.at;
        self.inner
            .deserialize_tuple_struct(name, len, FilterVisitor { inner: visitor, at })
    }

    fn deserialize_struct<V: Visitor<'de>>(
        self,
        name: &'static str,
        fields: &'static [&'static str],
        visitor: V,
    ) -> Result<V::Value, Self::Error> {
        let at = self.at;
        self.inner
            .deserialize_struct(name, fields, FilterVisitor { inner: visitor, at })
    }

    fn deserialize_enum<V: Visitor<'de>>(
        self,
        name: &'static str,
        variants: &'static [&'static str],
        visitor: V,
    ) -> Result<V::Value, Self::Error> {
        let at = self.at;
        self.inner
            .deserialize_enum(name, variants, FilterVisitor { inner: visitor, at })
    }

    fn is_human_readable(&self) -> bool {
        self.inner.is_human_readable()
    }
}

macro_rules! visit {
    ($($method:ident: $t:ty),*) => {
        $(fn $method<E: de::Error>(self, v: $t) -> Result<Self::Value, E> {
            self.inner.$method(v)
        })*
    };
}

impl<'de, V: Visitor<'de>> Visitor<'de> for FilterVisitor<V> {
    type Value = V::Value;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        self.inner.expecting(f)
    }

    visit!(
        visit_bool: bool, visit_i8: i8, visit_i16: i16, visit_i32: i32, visit_i64: i64,
        visit_i128: i128, visit_u8: u8, visit_u16: u16, visit_u32: u32, visit_u64: u64,
        visit_u128: u128, visit_f32: f32, visit_f64: f64, visit_char: char,
        visit_str: &str, visit_borrowed_str: &'de str, visit_string: String,
        visit_bytes: &[u8], visit_borrowed_bytes: &'de [u8], visit_byte_buf: Vec<u8>
    );

    fn visit_none<E: de::Error>(self) -> Result<Self::Value, E> {
        self.inner.visit_none()
    }

    fn visit_unit<E: de::Error>(self) -> Result<Self::Value, E> {
        self.inner.visit_unit()
    }

    fn visit_some<D: Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
        self.inner.visit_some(Filter {
            inner: d,
            at: self.at,
        })
    }

    fn visit_newtype_struct<D: Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
        self.inner.visit_newtype_struct(Filter {
            inner: d,
            at: self.at,
        })
    }

    fn visit_seq<A: SeqAccess<'de>>(self, seq: A) -> Result<Self::Value, A::Error> {
        // Only the managed fields' list is looked into: its entries are filtered.
        match self.at {
            At::ManagedFields => self.inner.visit_seq(FilterSeq {
                inner: seq,
                at: At::Entry,
            }),
            _ => self.inner.visit_seq(seq),
        }
    }

    fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<Self::Value, A::Error> {
        match self.at {
            At::ManagedFields => self.inner.visit_map(map),
            at => self.inner.visit_map(FilterMap {
                inner: map,
                at,
                next: None,
            }),
        }
    }

    fn visit_enum<A: de::EnumAccess<'de>>(self, data: A) -> Result<Self::Value, A::Error> {
        self.inner.visit_enum(data)
    }
}

impl<'de, S: DeserializeSeed<'de>> DeserializeSeed<'de> for FilterSeed<S> {
    type Value = S::Value;

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
        self.inner.deserialize(Filter {
            inner: d,
            at: self.at,
        })
    }
}

/// A map key, borrowed from the input where it can be.
pub(crate) struct Key<'de>(pub(crate) Cow<'de, str>);

impl<'de> de::Deserialize<'de> for Key<'de> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct KeyVisitor;
        impl<'de> Visitor<'de> for KeyVisitor {
            type Value = Key<'de>;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a string key")
            }
            fn visit_borrowed_str<E: de::Error>(self, v: &'de str) -> Result<Key<'de>, E> {
                Ok(Key(Cow::Borrowed(v)))
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<Key<'de>, E> {
                Ok(Key(Cow::Owned(v.to_string())))
            }
            fn visit_string<E: de::Error>(self, v: String) -> Result<Key<'de>, E> {
                Ok(Key(Cow::Owned(v)))
            }
        }
        d.deserialize_str(KeyVisitor)
    }
}

impl<'de, A: MapAccess<'de>> MapAccess<'de> for FilterMap<A> {
    type Error = A::Error;

    fn next_key_seed<K: DeserializeSeed<'de>>(
        &mut self,
        seed: K,
    ) -> Result<Option<K::Value>, Self::Error> {
        loop {
            let Some(Key(key)) = self.inner.next_key::<Key<'de>>()? else {
                return Ok(None);
            };
            if self.at.skips(&key) {
                self.inner.next_value::<IgnoredAny>()?;
                continue;
            }
            self.next = self.at.child(&key);
            let key: de::value::CowStrDeserializer<'_, A::Error> = key.into_deserializer();
            return seed.deserialize(key).map(Some);
        }
    }

    fn next_value_seed<V: DeserializeSeed<'de>>(
        &mut self,
        seed: V,
    ) -> Result<V::Value, Self::Error> {
        match self.next.take() {
            Some(at) => self.inner.next_value_seed(FilterSeed { inner: seed, at }),
            None => self.inner.next_value_seed(seed),
        }
    }

    fn size_hint(&self) -> Option<usize> {
        self.inner.size_hint()
    }
}

impl<'de, A: SeqAccess<'de>> SeqAccess<'de> for FilterSeq<A> {
    type Error = A::Error;

    fn next_element_seed<T: DeserializeSeed<'de>>(
        &mut self,
        seed: T,
    ) -> Result<Option<T::Value>, Self::Error> {
        self.inner.next_element_seed(FilterSeed {
            inner: seed,
            at: self.at,
        })
    }

    fn size_hint(&self) -> Option<usize> {
        self.inner.size_hint()
    }
}

/// A watch event of [`Slim`] objects as one of the objects themselves.
pub fn event<K>(e: watcher::Event<Slim<K>>) -> watcher::Event<K> {
    match e {
        watcher::Event::Apply(o) => watcher::Event::Apply(o.0),
        watcher::Event::Delete(o) => watcher::Event::Delete(o.0),
        watcher::Event::Init => watcher::Event::Init,
        watcher::Event::InitApply(o) => watcher::Event::InitApply(o.0),
        watcher::Event::InitDone => watcher::Event::InitDone,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::{apps::v1::Deployment, core::v1::ConfigMap};
    use serde_json::json;

    fn managed(n: usize) -> serde_json::Value {
        json!((0..n).map(|i| json!({
            "manager": format!("m{i}"), "operation": "Update", "apiVersion": "v1",
            "time": "2026-12-01T00:00:00Z", "fieldsType": "FieldsV1",
            "fieldsV1": {"f:spec": {"f:replicas": {}, "f:template": {"f:metadata": {"f:labels": {".": {}}}}}},
        })).collect::<Vec<_>>())
    }

    #[test]
    fn field_sets_are_skipped_and_everything_else_is_kept() {
        let text = json!({
            "apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": "qwen", "namespace": "ns", "labels": {"fieldsV1": "a label", "time": "t"},
                         "annotations": {"a": "b"}, "managedFields": managed(2)},
            "spec": {"replicas": 2, "selector": {"matchLabels": {"app": "x"}},
                     "template": {"metadata": {"labels": {"app": "x"}},
                                  "spec": {"containers": [{"name": "c", "image": "i",
                                           "env": [{"name": "fieldsV1", "value": "kept"}]}]}}},
            "status": {"replicas": 2, "conditions": [{"type": "Available", "status": "True"}]},
        })
        .to_string();
        let slim: Slim<Deployment> = serde_json::from_str(&text).unwrap();
        let mut full: Deployment = serde_json::from_str(&text).unwrap();
        let entries = full.metadata.managed_fields.as_mut().unwrap();
        assert!(entries.iter().all(|m| m.fields_v1.is_some()));
        for m in entries.iter_mut() {
            m.fields_v1 = None;
            m.fields_type = None;
            m.time = None;
        }
        assert_eq!(
            slim.0, full,
            "only the entries' set, its type and time differ"
        );
        let kept = slim.0.metadata.managed_fields.unwrap();
        assert_eq!(kept[1].manager.as_deref(), Some("m1"));
        assert_eq!(kept[1].operation.as_deref(), Some("Update"));
        assert_eq!(kept[1].api_version.as_deref(), Some("v1"));
    }

    #[test]
    fn a_key_named_like_the_field_set_elsewhere_is_data() {
        let text = json!({"metadata": {"name": "c", "managedFields": managed(1)},
                          "data": {"fieldsV1": "x", "managedFields": "y"}})
        .to_string();
        let slim: Slim<ConfigMap> = serde_json::from_str(&text).unwrap();
        let data = slim.0.data.unwrap();
        assert_eq!(data["fieldsV1"], "x");
        assert_eq!(data["managedFields"], "y");
        assert!(
            slim.0.metadata.managed_fields.unwrap()[0]
                .fields_v1
                .is_none()
        );
    }

    #[test]
    fn errors_are_the_inner_types_errors() {
        let text = json!({"metadata": {"name": 5}}).to_string();
        let err = serde_json::from_str::<Slim<ConfigMap>>(&text).unwrap_err();
        assert!(err.to_string().contains("invalid type"), "{err}");
    }
}
