/*
 * faiss_c.cc - the few FAISS C API functions promptcache calls, implemented
 * over the C++ library. Debian's libfaiss-dev ships the C API headers
 * (<faiss/c_api/...>) but no compiled libfaiss_c, only libfaiss.a; this file
 * stands in for it. The Makefile links a system libfaiss_c instead when one
 * exists and then leaves this file out, so every signature here is exactly
 * the installed header's, and the rest of the project (C) includes only
 * those headers.
 *
 * Owns nothing but a thread-local copy of the last error message. Every
 * function that can throw catches everything at this boundary (no C++
 * exception ever crosses into C) and returns the codes of error_c.h:
 * 0, -1 unknown, -2 FAISS exception, -4 std:: exception.
 *
 * Used by src/vindex.c (IVF with SQ8/flat codes, k-means quantizer training,
 * removal) and bench/vindex-speed.c (the index types compared there).
 */
#include <faiss/AutoTune.h>
#include <faiss/Clustering.h>
#include <faiss/Index.h>
#include <faiss/IndexFlat.h>
#include <faiss/IndexIVF.h>
#include <faiss/IndexIVFFlat.h>
#include <faiss/IndexScalarQuantizer.h>
#include <faiss/impl/IDSelector.h>
#include <faiss/impl/FaissException.h>
#include <faiss/index_factory.h>

#include <faiss/c_api/AutoTune_c.h>
#include <faiss/c_api/Clustering_c.h>
#include <faiss/c_api/IndexFlat_c.h>
#include <faiss/c_api/IndexIVFFlat_c.h>
#include <faiss/c_api/IndexIVF_c.h>
#include <faiss/c_api/IndexScalarQuantizer_c.h>
#include <faiss/c_api/Index_c.h>
#include <faiss/c_api/error_c.h>
#include <faiss/c_api/impl/AuxIndexStructures_c.h>
#include <faiss/c_api/index_factory_c.h>

#include <exception>
#include <string>

namespace
{

thread_local std::string last_error;

/* Run f, turning any exception into an error code and a message. */
template <class F> int guarded(F &&f)
{
    try {
        f();
        return OK;
    } catch (const faiss::FaissException &e) {
        last_error = e.what();
        return FAISS_EXCEPT;
    } catch (const std::exception &e) {
        last_error = e.what();
        return STD_EXCEPT;
    } catch (...) {
        last_error = "unknown exception";
        return UNKNOWN_EXCEPT;
    }
}

faiss::Index *cxx(FaissIndex *p)
{
    return reinterpret_cast<faiss::Index *>(p);
}

const faiss::Index *cxx(const FaissIndex *p)
{
    return reinterpret_cast<const faiss::Index *>(p);
}

/* The C API's IndexIVF handle: NULL-safe downcast, for any IVF subclass. */
faiss::IndexIVF *ivf(FaissIndexIVF *p)
{
    return dynamic_cast<faiss::IndexIVF *>(reinterpret_cast<faiss::Index *>(p));
}

faiss::MetricType metric(FaissMetricType m)
{
    return m == METRIC_L2 ? faiss::METRIC_L2 : faiss::METRIC_INNER_PRODUCT;
}

faiss::ScalarQuantizer::QuantizerType qtype(FaissQuantizerType qt)
{
    switch (qt) {
    case QT_8bit:
        return faiss::ScalarQuantizer::QT_8bit;
    case QT_4bit:
        return faiss::ScalarQuantizer::QT_4bit;
    case QT_8bit_uniform:
        return faiss::ScalarQuantizer::QT_8bit_uniform;
    case QT_4bit_uniform:
        return faiss::ScalarQuantizer::QT_4bit_uniform;
    case QT_fp16:
        return faiss::ScalarQuantizer::QT_fp16;
    case QT_8bit_direct:
        return faiss::ScalarQuantizer::QT_8bit_direct;
    case QT_6bit:
        return faiss::ScalarQuantizer::QT_6bit;
    }
    throw std::invalid_argument("unknown scalar quantizer type");
}

} // namespace

/* --- errors -------------------------------------------------------------------- */

const char *faiss_get_last_error()
{
    return last_error.c_str();
}

/* --- Index ---------------------------------------------------------------------- */

void faiss_Index_free(FaissIndex *obj)
{
    delete cxx(obj);
}

idx_t faiss_Index_ntotal(const FaissIndex *index)
{
    return cxx(index)->ntotal;
}

int faiss_Index_train(FaissIndex *index, idx_t n, const float *x)
{
    return guarded([&] { cxx(index)->train(n, x); });
}

int faiss_Index_add(FaissIndex *index, idx_t n, const float *x)
{
    return guarded([&] { cxx(index)->add(n, x); });
}

int faiss_Index_add_with_ids(FaissIndex *index, idx_t n, const float *x, const idx_t *xids)
{
    return guarded([&] { cxx(index)->add_with_ids(n, x, xids); });
}

int faiss_Index_search(const FaissIndex *index, idx_t n, const float *x, idx_t k, float *distances,
                       idx_t *labels)
{
    return guarded([&] { cxx(index)->search(n, x, k, distances, labels); });
}

int faiss_Index_remove_ids(FaissIndex *index, const FaissIDSelector *sel, size_t *n_removed)
{
    return guarded([&] {
        size_t n = cxx(index)->remove_ids(*reinterpret_cast<const faiss::IDSelector *>(sel));
        if (n_removed != nullptr)
            *n_removed = n;
    });
}

int faiss_index_factory(FaissIndex **p_index, int d, const char *description,
                        FaissMetricType metric_type)
{
    return guarded([&] {
        *p_index = reinterpret_cast<FaissIndex *>(
            faiss::index_factory(d, description, metric(metric_type)));
    });
}

/* --- flat and IVF indexes ---------------------------------------------------------- */

int faiss_IndexFlatIP_new_with(FaissIndexFlatIP **p_index, idx_t d)
{
    return guarded(
        [&] { *p_index = reinterpret_cast<FaissIndexFlatIP *>(new faiss::IndexFlatIP(d)); });
}

int faiss_IndexIVFFlat_new_with_metric(FaissIndexIVFFlat **p_index, FaissIndex *quantizer, size_t d,
                                       size_t nlist, FaissMetricType metric_type)
{
    return guarded([&] {
        *p_index = reinterpret_cast<FaissIndexIVFFlat *>(
            new faiss::IndexIVFFlat(cxx(quantizer), d, nlist, metric(metric_type)));
    });
}

int faiss_IndexIVFScalarQuantizer_new_with_metric(FaissIndexIVFScalarQuantizer **p_index,
                                                  FaissIndex *quantizer, size_t d, size_t nlist,
                                                  FaissQuantizerType qt,
                                                  FaissMetricType metric_type, int encode_residual)
{
    return guarded([&] {
        *p_index =
            reinterpret_cast<FaissIndexIVFScalarQuantizer *>(new faiss::IndexIVFScalarQuantizer(
                cxx(quantizer), d, nlist, qtype(qt), metric(metric_type), encode_residual != 0));
    });
}

void faiss_IndexIVF_set_nprobe(FaissIndexIVF *obj, size_t val)
{
    if (faiss::IndexIVF *p = ivf(obj))
        p->nprobe = val;
}

void faiss_IndexIVF_set_own_fields(FaissIndexIVF *obj, int val)
{
    if (faiss::IndexIVF *p = ivf(obj))
        p->own_fields = val != 0;
}

/* --- k-means ------------------------------------------------------------------------ */

void faiss_ClusteringParameters_init(FaissClusteringParameters *params)
{
    faiss::ClusteringParameters d;
    params->niter = d.niter;
    params->nredo = d.nredo;
    params->verbose = d.verbose;
    params->spherical = d.spherical;
    params->int_centroids = d.int_centroids;
    params->update_index = d.update_index;
    params->frozen_centroids = d.frozen_centroids;
    params->min_points_per_centroid = d.min_points_per_centroid;
    params->max_points_per_centroid = d.max_points_per_centroid;
    params->seed = d.seed;
    params->decode_block_size = d.decode_block_size;
}

int faiss_Clustering_new_with_params(FaissClustering **p_clustering, int d, int k,
                                     const FaissClusteringParameters *cp)
{
    return guarded([&] {
        faiss::ClusteringParameters p;
        p.niter = cp->niter;
        p.nredo = cp->nredo;
        p.verbose = cp->verbose != 0;
        p.spherical = cp->spherical != 0;
        p.int_centroids = cp->int_centroids != 0;
        p.update_index = cp->update_index != 0;
        p.frozen_centroids = cp->frozen_centroids != 0;
        p.min_points_per_centroid = cp->min_points_per_centroid;
        p.max_points_per_centroid = cp->max_points_per_centroid;
        p.seed = cp->seed;
        p.decode_block_size = cp->decode_block_size;
        *p_clustering = reinterpret_cast<FaissClustering *>(new faiss::Clustering(d, k, p));
    });
}

int faiss_Clustering_train(FaissClustering *clustering, idx_t n, const float *x, FaissIndex *index)
{
    return guarded(
        [&] { reinterpret_cast<faiss::Clustering *>(clustering)->train(n, x, *cxx(index)); });
}

void faiss_Clustering_free(FaissClustering *clustering)
{
    delete reinterpret_cast<faiss::Clustering *>(clustering);
}

/* --- id selectors ------------------------------------------------------------------- */

int faiss_IDSelectorBatch_new(FaissIDSelectorBatch **p_sel, size_t n, const idx_t *indices)
{
    return guarded([&] {
        *p_sel = reinterpret_cast<FaissIDSelectorBatch *>(new faiss::IDSelectorBatch(n, indices));
    });
}

void faiss_IDSelector_free(FaissIDSelector *obj)
{
    delete reinterpret_cast<faiss::IDSelector *>(obj);
}

/* --- search-time parameters (efSearch, nprobe) by name ----------------------------------- */

int faiss_ParameterSpace_new(FaissParameterSpace **space)
{
    return guarded(
        [&] { *space = reinterpret_cast<FaissParameterSpace *>(new faiss::ParameterSpace()); });
}

void faiss_ParameterSpace_free(FaissParameterSpace *obj)
{
    delete reinterpret_cast<faiss::ParameterSpace *>(obj);
}

int faiss_ParameterSpace_set_index_parameter(const FaissParameterSpace *space, FaissIndex *index,
                                             const char *name, double value)
{
    return guarded([&] {
        reinterpret_cast<const faiss::ParameterSpace *>(space)->set_index_parameter(cxx(index),
                                                                                    name, value);
    });
}
