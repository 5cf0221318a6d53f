"""The names Spark 4.3's SQL resolves as built-in functions (`SHOW FUNCTIONS`, the word-named ones),
and the keyword forms its parser reads as calls. A call the Spark rewrite leaves under any other
name is a DuckDB function Spark does not have: refused at compile time, never a run-time surprise.
The Spark tier checks this list against the running Spark (test_spark_dialect_conformance)."""

from __future__ import annotations

from typing import Final

SPARK_FUNCTIONS: Final[frozenset[str]] = frozenset(
    """
abs acos acosh add_months aes_decrypt aes_encrypt aggregate and any any_value approx_count_distinct
approx_percentile approx_top_k approx_top_k_accumulate approx_top_k_combine approx_top_k_estimate array
array_agg array_append array_compact array_contains array_distinct array_except array_insert
array_intersect array_join array_max array_min array_position array_prepend array_remove array_repeat
array_size array_sort array_union arrays_overlap arrays_zip ascii asin asinh assert_true atan atan2
atanh avg base64 between bigint bin binary bit_and bit_count bit_get bit_length bit_or bit_xor
bitmap_and_agg bitmap_bit_position bitmap_bucket_number bitmap_construct_agg bitmap_count bitmap_or_agg
bool_and bool_or boolean bround btrim cardinality case cast cbrt ceil ceiling char char_length
character_length chr coalesce collate collation collations collect_list collect_set collect_union concat
concat_ws contains conv convert_timezone corr cos cosh cot count count_if count_min_sketch counter_diff
covar_pop covar_samp crc32 csc cume_dist curdate current_catalog current_database current_date
current_path current_schema current_time current_timestamp current_timezone current_user date date_add
date_diff date_format date_from_unix_date date_part date_sub date_trunc dateadd datediff datepart day
dayname dayofmonth dayofweek dayofyear decimal decode degrees dense_rank div double e element_at elt
encode endswith equal_null every exists exp explode explode_outer expm1 extract factorial filter
find_in_set first first_value flatten float floor forall format_number format_string from_avro
from_base32 from_csv from_json from_protobuf from_unixtime from_utc_timestamp from_xml get
get_json_object getbit greatest grouping grouping_id hash hex histogram_numeric hll_sketch_agg
hll_sketch_estimate hll_union hll_union_agg hmac hour hypot if ifnull ilike in initcap inline
inline_outer input_file_block_length input_file_block_start input_file_name instr int is_valid_utf8
is_valid_variant is_variant_null isnan isnotnull isnull jaro_winkler_similarity java_method
json_array_length json_object_keys json_tuple kll_merge_agg_bigint kll_merge_agg_double
kll_merge_agg_float kll_sketch_agg_bigint kll_sketch_agg_double kll_sketch_agg_float
kll_sketch_get_n_bigint kll_sketch_get_n_double kll_sketch_get_n_float kll_sketch_get_quantile_bigint
kll_sketch_get_quantile_double kll_sketch_get_quantile_float kll_sketch_get_rank_bigint
kll_sketch_get_rank_double kll_sketch_get_rank_float kll_sketch_merge_bigint kll_sketch_merge_double
kll_sketch_merge_float kll_sketch_to_string_bigint kll_sketch_to_string_double
kll_sketch_to_string_float kurtosis lag last last_day last_value lcase lead least left len length
levenshtein like listagg ln localtime localtimestamp locate log log10 log1p log2 lower lpad ltrim
luhn_check make_date make_dt_interval make_interval make_time make_timestamp make_timestamp_ltz
make_timestamp_ntz make_valid_utf8 make_ym_interval map map_concat map_contains_key map_entries
map_filter map_from_arrays map_from_entries map_keys map_values map_zip_with mask max max_by md5 mean
measure median min min_by minute mod mode monotonically_increasing_id month monthname months_between
named_struct nanvl negative next_day not now nth_value ntile nullif nullifzero nvl nvl2 octet_length or
overlay parse_json parse_url percent_rank percentile percentile_approx percentile_cont percentile_disc
pi pmod posexplode posexplode_outer position positive pow power printf python_worker_logs quarter quote
radians raise_error rand randn random randstr range rank reduce reflect regexp regexp_count
regexp_extract regexp_extract_all regexp_instr regexp_like regexp_replace regexp_substr regr_avgx
regr_avgy regr_count regr_intercept regr_r2 regr_slope regr_sxx regr_sxy regr_syy repeat replace reverse
right rint rlike round row_number rpad rtrim schema_of_avro schema_of_csv schema_of_json
schema_of_variant schema_of_variant_agg schema_of_xml sec second sentences sequence session_user
session_window sha sha1 sha2 shiftleft shiftright shiftrightunsigned shuffle sign signum sin sinh size
skewness slice smallint some sort_array soundex space spark_partition_id split split_part sql_keywords
sqrt st_asbinary st_geogfromwkb st_geomfromwkb st_setsrid st_srid stack startswith std stddev stddev_pop
stddev_samp str_to_map string string_agg struct substr substring substring_index sum tan tanh
theta_difference theta_intersection theta_intersection_agg theta_sketch_agg theta_sketch_estimate
theta_union theta_union_agg time time_bucket time_diff time_from_micros time_from_millis
time_from_seconds time_to_micros time_to_millis time_to_seconds time_trunc timestamp timestamp_micros
timestamp_millis timestamp_nanos timestamp_seconds tinyint to_avro to_base32 to_binary to_char to_csv
to_date to_json to_number to_protobuf to_time to_timestamp to_timestamp_ltz to_timestamp_ntz
to_unix_timestamp to_utc_timestamp to_varchar to_variant_object to_xml transform transform_keys
transform_values translate trim trunc try_add try_aes_decrypt try_avg try_divide try_element_at
try_make_interval try_make_timestamp try_make_timestamp_ltz try_make_timestamp_ntz try_mod try_multiply
try_parse_json try_parse_url try_reflect try_subtract try_sum try_to_binary try_to_date try_to_number
try_to_time try_to_timestamp try_url_decode try_validate_utf8 try_variant_array_append try_variant_get
try_variant_insert try_variant_set tuple_difference_double tuple_difference_integer
tuple_difference_theta_double tuple_difference_theta_integer tuple_intersection_agg_double
tuple_intersection_agg_integer tuple_intersection_double tuple_intersection_integer
tuple_intersection_theta_double tuple_intersection_theta_integer tuple_sketch_agg_double
tuple_sketch_agg_integer tuple_sketch_estimate_double tuple_sketch_estimate_integer
tuple_sketch_summary_double tuple_sketch_summary_integer tuple_sketch_theta_double
tuple_sketch_theta_integer tuple_union_agg_double tuple_union_agg_integer tuple_union_double
tuple_union_integer tuple_union_theta_double tuple_union_theta_integer typeof ucase unbase64 unhex
uniform unix_date unix_micros unix_millis unix_nanos unix_seconds unix_timestamp upper url_decode
url_encode user uuid validate_utf8 var_pop var_samp variance variant_array_append variant_delete
variant_explode variant_explode_outer variant_get variant_insert variant_set variant_strip_nulls
vector_avg vector_cosine_similarity vector_inner_product vector_l2_distance vector_norm vector_normalize
vector_sum version weekday weekofyear when width_bucket window window_time xpath xpath_boolean
xpath_double xpath_float xpath_int xpath_long xpath_number xpath_short xpath_string xxhash64 year
zeroifnull zip_with
""".split()
)

# Parsed by Spark's grammar rather than looked up in its function registry.
SPARK_CALL_KEYWORDS: Final[frozenset[str]] = frozenset(
    {
        "cast",
        "try_cast",
        "extract",
        "timestampdiff",
        "timestampadd",
        "trim",
        "position",
        "struct",
        "array",
        "map",
    }
)
